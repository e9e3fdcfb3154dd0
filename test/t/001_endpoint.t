#!/usr/bin/perl
#
# 001_endpoint.t - the ClickHouse HTTP endpoint (test/chendpoint) as a client
# sees it: queries, RowBinary streaming inserts, errors and their HTTP
# statuses, authentication and accounts, concurrency, EXCHANGE TABLES,
# statements under the client's query_id (and hidden from it), and the
# test-only control port (faults: error, lost, delay, hold, hold_vanish,
# stubborn, hold_reply, midstream, refuse, idle_close; the query log,
# running statements, connections), and what a stop answers.
#
# Expects a running endpoint (test/sandbox.sh start) and, in the environment:
#   DPWIN_CH_URL           e.g. http://127.0.0.1:18123
#   DPWIN_CH_USER          user name
#   DPWIN_CH_PASSWORD      password
#   DPWIN_CH_CONTROL_URL   e.g. http://127.0.0.1:18124
# Uses the curl command, as any HTTP client would.
use strict;
use warnings;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time);

my $url  = $ENV{DPWIN_CH_URL};
my $user = $ENV{DPWIN_CH_USER};
my $pass = $ENV{DPWIN_CH_PASSWORD};
my $ctl  = $ENV{DPWIN_CH_CONTROL_URL};
plan skip_all => 'DPWIN_CH_URL, DPWIN_CH_USER, DPWIN_CH_PASSWORD and '
  . 'DPWIN_CH_CONTROL_URL must be set (test/sandbox.sh start)'
  unless defined $url && defined $user && defined $pass && defined $ctl;
$url =~ s{/+$}{};
$ctl =~ s{/+$}{};

my $tmp = tempdir(CLEANUP => 1);
my $seq = 0;
# Unique per run, so reruns against the same data directory do not collide.
my $db = sprintf('dpwin_t001_%d_%d', time(), $$);

sub uri_escape {
	my ($s) = @_;
	$s =~ s/([^A-Za-z0-9\-_.~])/sprintf('%%%02X', ord $1)/ge;
	return $s;
}

sub write_file {
	my ($data) = @_;
	my $f = sprintf('%s/body%d', $tmp, ++$seq);
	open(my $fh, '>:raw', $f) or die "$f: $!";
	print $fh $data;
	close($fh) or die "$f: $!";
	return $f;
}

sub read_file {
	my ($f) = @_;
	open(my $fh, '<:raw', $f) or return '';
	local $/;
	my $d = <$fh>;
	close($fh);
	return $d // '';
}

# Build the curl command line for a request.
#   url, params (array ref of key => value), body (bytes), chunked,
#   auth: 'basic' (default), 'headers', 'params', 'none', or [user, pass]
#   max_time, headers (array ref)
sub curl_cmd {
	my (%o) = @_;
	my $n = ++$seq;
	my ($hf, $bf) = ("$tmp/h$n", "$tmp/b$n");
	my @params = @{ $o{params} // [] };
	my $auth = $o{auth} // 'basic';
	my @cmd = ('curl', '-s', '-g', '-D', $hf, '-o', $bf,
		'-w', '%{http_code}', '--max-time', $o{max_time} // 30);
	my ($u, $p, $via) = ref $auth ? @$auth : ($user, $pass, $auth);
	if ($via eq 'headers') {
		push @cmd, '-H', "X-ClickHouse-User: $u", '-H', "X-ClickHouse-Key: $p";
	} elsif ($via eq 'params') {
		push @params, user => $u, password => $p;
	} elsif ($via ne 'none') {
		push @cmd, '-u', "$u:$p";
	}
	push @cmd, map { ('-H', $_) } @{ $o{headers} // [] };
	push @cmd, '-H', 'Transfer-Encoding: chunked' if $o{chunked};
	if (defined $o{body}) {
		push @cmd, '--data-binary', '@' . write_file($o{body});
	} elsif ($o{post}) {
		push @cmd, '-X', 'POST';
	}
	my $q = '';
	while (my ($k, $v) = splice(@params, 0, 2)) {
		$q .= ($q eq '' ? '?' : '&') . uri_escape($k) . '=' . uri_escape($v);
	}
	push @cmd, ($o{url} // "$url/") . $q;
	return (\@cmd, $hf, $bf);
}

sub parse_reply {
	my ($rc, $code, $hf, $bf) = @_;
	my %h;
	# With "100 Continue" there are two header blocks; keep the last.
	for my $block (split /\r\n\r\n/, read_file($hf)) {
		next unless $block =~ m{^HTTP/};
		%h = ();
		for my $line (split /\r\n/, $block) {
			$h{ lc $1 } = $2 if $line =~ /^([^:]+):\s*(.*)$/;
		}
	}
	return { rc => $rc, status => $code + 0, headers => \%h,
		body => read_file($bf) };
}

# One request; returns { rc, status, headers (lower-case names), body }.
sub http {
	my (%o) = @_;
	my ($cmd, $hf, $bf) = curl_cmd(%o);
	open(my $out, '-|', @$cmd) or die "curl: $!";
	my $code = <$out> // '0';
	close($out);
	return parse_reply($? >> 8, $code, $hf, $bf);
}

# Run a query (POST, query in the body unless params carry it).
sub chq {
	my ($sql, %o) = @_;
	if (defined $o{body}) {
		push @{ $o{params} }, query => $sql;
	} elsif ($o{get}) {
		push @{ $o{params} }, query => $sql;
	} else {
		$o{body} = $sql;
	}
	return http(%o);
}

# Run a query that must succeed; returns its body.
sub ok_q {
	my ($sql, $name, %o) = @_;
	my $r = chq($sql, %o);
	is($r->{status}, 200, $name // $sql)
	  or diag("status $r->{status} rc $r->{rc}: $r->{body}");
	return $r->{body};
}

sub ctl {
	my ($path, %params) = @_;
	my @p = map { ($_, $params{$_}) } sort keys %params;
	return http(url => "$ctl$path", params => \@p, auth => 'none',
		post => $path !~ m{^/(?:log|ping|running|connections|faults|query_ids|sockets|holds|sessions)\z});
}

# ---- RowBinary encoding ----
sub varint {
	my ($n) = @_;
	my $o = '';
	while (1) {
		my $b = $n & 0x7f;
		$n >>= 7;
		if ($n) { $o .= chr($b | 0x80) } else { $o .= chr($b); last }
	}
	return $o;
}
sub rb_string  { my ($s) = @_; return varint(length $s) . $s }
sub rb_int64   { return pack('q<', $_[0]) }
sub rb_uint64  { return pack('Q<', $_[0]) }
sub rb_nullable_dec { defined $_[0] ? "\0" . pack('q<', $_[0]) : "\1" }

# ---------------------------------------------------------------------
# Health and basics
# ---------------------------------------------------------------------
{
	my $r = http(url => "$url/ping", auth => 'none');
	is($r->{status}, 200, '/ping answers 200');
	is($r->{body}, "Ok.\n", '/ping says Ok.');
	$r = http(url => "$url/", auth => 'none');
	is($r->{body}, "Ok.\n", 'GET / without a query says Ok.');
	$r = http(url => "$ctl/ping", auth => 'none');
	is($r->{body}, "Ok.\n", 'control /ping says Ok.');
}

{
	my $r = chq('SELECT 1 + 1', get => 1);
	is($r->{status}, 200, 'GET query');
	is($r->{body}, "2\n", 'GET query result (TabSeparated by default)');
	like($r->{headers}{'content-type'}, qr{^text/tab-separated-values},
		'TabSeparated Content-Type');
	is($r->{headers}{'x-clickhouse-format'}, 'TabSeparated',
		'X-ClickHouse-Format');
	like($r->{headers}{'x-clickhouse-query-id'},
		qr/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
		'a generated query id is returned');

	$r = chq('SELECT 42', params => [query_id => "qid-$db"]);
	is($r->{headers}{'x-clickhouse-query-id'}, "qid-$db",
		'the given query_id is echoed');
	$r = chq('SELECT 1', params => [default_format => 'JSONEachRow']);
	is($r->{body}, qq({"1":1}\n), 'default_format applies');
	$r = chq("SELECT 'a' AS x FORMAT CSVWithNames");
	is($r->{body}, qq("x"\n"a"\n), 'FORMAT in the query wins');
	is($r->{headers}{'x-clickhouse-format'}, 'CSVWithNames',
		'X-ClickHouse-Format follows the query');
}

# Authentication, as clickhouse-server: basic, headers or URL parameters.
{
	is(chq('SELECT 1', auth => 'headers')->{body}, "1\n",
		'X-ClickHouse-User/Key headers');
	is(chq('SELECT 1', auth => 'params')->{body}, "1\n",
		'user/password URL parameters');
	for my $case ([[ $user, "$pass-wrong", 'basic' ], 'basic'],
		      [[ "$user-nobody", $pass, 'headers' ], 'headers'],
		      [[ $user, "$pass-wrong", 'params' ], 'params'],
		      ['none', 'none']) {
		my ($auth, $how) = @$case;
		my $r = chq('SELECT 1', auth => $auth);
		is($r->{status}, 403, "bad credentials ($how): 403");
		is($r->{headers}{'x-clickhouse-exception-code'}, 516,
			"bad credentials ($how): code 516");
		like($r->{body},
			qr/^Code: 516\. DB::Exception: \S+: Authentication failed: password is incorrect, or there is no user with such name\. \(AUTHENTICATION_FAILED\)/,
			"bad credentials ($how): message");
		ok($r->{headers}{'x-clickhouse-query-id'},
			"bad credentials ($how): query id still returned");
	}
}

# Errors: code header, message, and the server's HTTP status mapping.
{
	my $r = chq('SELEC 1');
	is($r->{status}, 400, 'syntax error: 400');
	is($r->{headers}{'x-clickhouse-exception-code'}, 62,
		'syntax error: code 62');
	like($r->{body}, qr/^Code: 62\. DB::Exception: .*\(SYNTAX_ERROR\)/s,
		'syntax error: message');

	$r = chq("SELECT * FROM $db.no_such_table");
	is($r->{status}, 404, 'unknown table: 404');
	ok($r->{headers}{'x-clickhouse-exception-code'} == 60
	   || $r->{headers}{'x-clickhouse-exception-code'} == 81,
		'unknown table/database: code 60 or 81');

	$r = chq('SELECT 1', params => [no_such_setting_xyz => 1]);
	is($r->{status}, 404, 'unknown setting: 404');
	is($r->{headers}{'x-clickhouse-exception-code'}, 115,
		'unknown setting: code 115');

	$r = chq('SELECT sleep(1)', params => [max_execution_time => '0.2']);
	is($r->{headers}{'x-clickhouse-exception-code'}, 159,
		'URL setting max_execution_time applies: code 159');
	is($r->{status}, 408, 'TIMEOUT_EXCEEDED: 408');

	$r = chq("SELECT throwIf(1)");
	is($r->{status}, 500, 'other errors: 500');

	$r = chq("CREATE DATABASE ${db}_ro", get => 1);
	is($r->{headers}{'x-clickhouse-exception-code'}, 164,
		'GET is readonly: code 164');
	is($r->{status}, 500, 'READONLY: 500 (not in the status map)');
}

# Per-request settings do not leak between requests.
{
	my $r = chq("SELECT getSetting('async_insert'), getSetting('max_threads')",
		params => [async_insert => 0, max_threads => 3]);
	is($r->{body}, "false\t3\n", 'URL settings apply to the query');
	$r = chq("SELECT getSetting('max_threads') = 3");
	is($r->{body}, "0\n", 'and only to that query');
}

# An engine session is kept for the next statement of the same set-up (as
# a server's per-request context costs next to nothing), unless the
# statement left something a server keeps only for one request.
{
	my $reused = sub {
		my $s = ctl('/sessions');
		return $s->{body} =~ /^reused (\d+)$/m ? $1 : -1;
	};
	my $before = $reused->();
	ok_q('SELECT 1', 'a statement') for 1 .. 2;
	cmp_ok($reused->(), '>', $before, 'the next statement runs in a kept session');

	ok_q('SET max_threads = 5', 'SET in a statement');
	is(chq("SELECT getSetting('max_threads') = 5")->{body}, "0\n",
		'a SET statement lasts one request');
	ok_q('USE system', 'USE in a statement');
	is(chq('SELECT currentDatabase()')->{body}, "default\n",
		'USE lasts one request');
	ok_q("CREATE TEMPORARY TABLE tmp_t001 (a UInt8)", 'a temporary table');
	is(chq("EXISTS TEMPORARY TABLE tmp_t001")->{body}, "0\n",
		'a temporary table lasts one request');
	my $r = chq("SELECT getSetting('readonly')", params => [readonly => 1]);
	is($r->{body}, "1\n", 'readonly as a URL setting');
	$r = chq("SELECT getSetting('readonly')", params => [readonly => 1]);
	is($r->{body}, "1\n", 'again, with its query_id carried')
	  or diag($r->{body});
	$r = chq("SELECT getSetting('readonly')", get => 1);
	is($r->{body}, "2\n", 'GET is readonly');
	$r = chq("SELECT getSetting('readonly')");
	is($r->{body}, "0\n", 'and POST after it is not');
}

# ---------------------------------------------------------------------
# Tables and RowBinary streaming inserts
# ---------------------------------------------------------------------
ok_q("CREATE DATABASE $db ENGINE = Atomic", 'create an Atomic database');
ok_q("CREATE TABLE $db.t (ts DateTime64(6, 'UTC'), amount Nullable(Decimal(18, 2)), s String) ENGINE = MergeTree ORDER BY ts",
	'create a MergeTree table');
{
	my $r = chq('SELECT name FROM system.tables WHERE database = currentDatabase()',
		params => [database => $db]);
	is($r->{body}, "t\n", 'database parameter sets the current database');
	# DROP ... SYNC needs the engine's background tasks (the endpoint
	# starts them even on a fresh data directory).
	ok_q("CREATE TABLE $db.gone (x UInt8) ENGINE = MergeTree ORDER BY x",
		'create a table to drop');
	$r = chq("DROP TABLE $db.gone SYNC", max_time => 10);
	is($r->{status}, 200, 'DROP TABLE ... SYNC returns') or diag("rc $r->{rc}");
}

{
	# Rows in ts order; strings include the byte pair 0x0A 0x0A, a tab,
	# NUL, backslash and non-ASCII.
	my @rows = (
		[-86400_000_000, -12345, "before\x0a\x0aepoch"],
		[0, undef, ''],
		[1_700_000_000_123_456, 99999999, "tab\there \\ nul\0 \x0a\x0a"],
		[1_700_000_000_123_457, 1, "\x{e9}t\x{e9} \xe2\x82\xac"],
	);
	my $body = '';
	for my $row (@rows) {
		$body .= rb_int64($row->[0]) . rb_nullable_dec($row->[1])
		  . rb_string($row->[2]);
	}
	my $r = http(body => $body, chunked => 1,
		params => [query => "INSERT INTO $db.t FORMAT RowBinary",
			   async_insert => 0]);
	is($r->{status}, 200, 'chunked RowBinary insert') or diag($r->{body});
	like($r->{headers}{'x-clickhouse-summary'} // '',
		qr/"written_rows":"4"/, 'X-ClickHouse-Summary counts the rows');

	$r = chq("SELECT ts, amount, s FROM $db.t ORDER BY ts FORMAT RowBinary");
	ok($r->{body} eq $body, 'RowBinary round trip is byte-exact')
	  or diag(sprintf('got %d bytes, sent %d', length $r->{body},
		length $body));

	$r = chq("SELECT toString(ts), toString(amount), hex(s) FROM $db.t ORDER BY ts");
	my $want = join('', map {
		sprintf("%s\t%s\t%s\n", $_->[0], $_->[1], uc unpack('H*', $_->[2]))
	} (['1969-12-31 00:00:00.000000', '-123.45', $rows[0][2]],
	   ['1970-01-01 00:00:00.000000', '\\N', ''],
	   ['2023-11-14 22:13:20.123456', '999999.99', $rows[2][2]],
	   ['2023-11-14 22:13:20.123457', '0.01', $rows[3][2]]));
	is($r->{body}, $want, 'values read back exactly (DateTime64, Decimal, NULL, bytes)');

	# The body may start with bytes the data-start rule would skip if the
	# line break after ?query= were missing: 0x0A and 0x20.
	my $edge = rb_int64(10) . rb_nullable_dec(32) . rb_string("edge\x0a")
	  . rb_int64(32) . rb_nullable_dec(undef) . rb_string(" edge2");
	$r = http(body => $edge, chunked => 1,
		params => [query => "INSERT INTO $db.t FORMAT RowBinary"]);
	is($r->{status}, 200, 'RowBinary body starting with 0x0A') or diag($r->{body});
	is(chq("SELECT ts, amount, s FROM $db.t WHERE s LIKE '%edge%' ORDER BY ts FORMAT RowBinary")->{body},
		$edge, 'body bytes 0x0A / 0x20 at the start are data, not separators');
	ok_q("ALTER TABLE $db.t DELETE WHERE s LIKE '%edge%' SETTINGS mutations_sync = 2",
		'remove the edge rows');

	# The query may also come first in the body, data after a newline.
	$r = http(body => "INSERT INTO $db.t (ts, s) FORMAT TSV\n"
		. "2024-01-01 00:00:00.5\tfrom body\n");
	is($r->{status}, 200, 'INSERT with query and data in the body');
	is(chq("SELECT count() FROM $db.t WHERE s = 'from body' AND amount IS NULL")->{body},
		"1\n", 'row from the body landed');

	# VALUES in the URL, tuples in the body.
	$r = http(body => "(toDateTime64('2024-01-02 00:00:00', 6, 'UTC'), 7.5, 'values')",
		params => [query => "INSERT INTO $db.t VALUES"]);
	is($r->{status}, 200, 'INSERT ... VALUES with the tuples in the body');
	is(chq("SELECT amount FROM $db.t WHERE s = 'values'")->{body}, "7.5\n",
		'VALUES row landed');

	# A failing insert returns the engine's error and inserts nothing.
	$r = http(body => "\x01\x02\x03", chunked => 1,
		params => [query => "INSERT INTO $db.t FORMAT RowBinary"]);
	isnt($r->{status}, 200, 'truncated RowBinary fails');
	ok($r->{headers}{'x-clickhouse-exception-code'},
		'truncated RowBinary: exception code') or diag($r->{body});
	$r = http(body => "x\n", params => [query => "INSERT INTO $db.nope FORMAT TSV"]);
	is($r->{status}, 404, 'insert into a missing table: 404');
	is(chq("SELECT count() FROM $db.t")->{body}, "6\n",
		'failed inserts added no rows');
}

# ---------------------------------------------------------------------
# Concurrent loaders
# ---------------------------------------------------------------------
{
	ok_q("CREATE TABLE $db.c (k UInt64, s String) ENGINE = MergeTree ORDER BY k",
		'create the concurrency table');
	my (@pids, @files);
	for my $w (0 .. 3) {
		my $body = '';
		$body .= rb_uint64($w * 1_000_000 + $_) . rb_string("w$w\x0a\x0a$_")
		  for 1 .. 20000;
		my ($cmd, $hf, $bf) = curl_cmd(body => $body, chunked => 1,
			params => [query => "INSERT INTO $db.c FORMAT RowBinary",
				   async_insert => 0]);
		my $pid = open(my $out, '-|', @$cmd) // die "fork: $!";
		push @pids, [$out, $hf, $bf];
	}
	my $all_ok = 1;
	for my $p (@pids) {
		my ($out, $hf, $bf) = @$p;
		my $code = <$out> // 0;
		close($out);
		my $r = parse_reply($? >> 8, $code, $hf, $bf);
		$all_ok = 0 unless $r->{status} == 200;
		diag("parallel insert: $r->{status} $r->{body}")
		  unless $r->{status} == 200;
	}
	ok($all_ok, '4 parallel chunked inserts all answered 200');
	is(chq("SELECT count(), uniqExact(k), countIf(s LIKE 'w3\n\n%') FROM $db.c")->{body},
		"80000\t80000\t20000\n", 'all their rows landed');
}

# ---------------------------------------------------------------------
# EXCHANGE TABLES swaps the tables' UUIDs (and contents)
# ---------------------------------------------------------------------
{
	ok_q("CREATE TABLE $db.a (x String) ENGINE = MergeTree ORDER BY x", 'create a');
	ok_q("CREATE TABLE $db.b (x String) ENGINE = MergeTree ORDER BY x", 'create b');
	ok_q("INSERT INTO $db.a VALUES ('in a')", 'fill a');
	ok_q("INSERT INTO $db.b VALUES ('in b')", 'fill b');
	my $uuids = "SELECT name, uuid FROM system.tables WHERE database = '$db' AND name IN ('a', 'b') ORDER BY name";
	my ($ua, $ub) = map { (split /\t/)[1] } split /\n/, chq($uuids)->{body};
	ok($ua && $ub && $ua ne $ub, 'tables have distinct UUIDs');
	ok_q("EXCHANGE TABLES $db.a AND $db.b", 'EXCHANGE TABLES');
	my ($na, $nb) = map { (split /\t/)[1] } split /\n/, chq($uuids)->{body};
	is($na, $ub, 'a now has b\'s UUID');
	is($nb, $ua, 'b now has a\'s UUID');
	is(chq("SELECT x FROM $db.a")->{body}, "in b\n", 'a now holds b\'s rows');
}

# ---------------------------------------------------------------------
# Control port: faults and the query log
# ---------------------------------------------------------------------
ok_q("CREATE TABLE $db.f (n UInt32, s String) ENGINE = MergeTree ORDER BY n",
	'create the fault table');
ctl('/faults/clear');

# error: the next N matching queries fail before executing.
{
	my $marker = "err_marker_$$";
	is(ctl('/fault', pattern => uc $marker, count => 2, mode => 'error',
		code => 209)->{status}, 200, 'register an error fault');
	for my $i (1, 2) {
		my $r = chq("SELECT '$marker'");
		is($r->{status}, 503, "error fault $i: status mapped (209 -> 503)");
		is($r->{headers}{'x-clickhouse-exception-code'}, 209,
			"error fault $i: code");
		like($r->{body}, qr/^Code: 209\. DB::Exception: injected fault/,
			"error fault $i: message");
	}
	is(chq("SELECT '$marker'")->{body}, "$marker\n",
		'the fault is spent after count matches');

	ctl('/fault', pattern => "$db.f", mode => 'error', code => 252);
	my $r = http(body => "1\tnever\n",
		params => [query => "INSERT INTO $db.f FORMAT TSV"]);
	is($r->{headers}{'x-clickhouse-exception-code'}, 252,
		'error fault on an INSERT');
	is(chq("SELECT count() FROM $db.f WHERE s = 'never'")->{body}, "0\n",
		'the failed INSERT did not run');
}

# lost: the statement runs, the connection closes without an answer.
{
	ctl('/fault', pattern => "$db.f", mode => 'lost');
	my $r = http(body => "2\tlost row\n", chunked => 1,
		params => [query => "INSERT INTO $db.f FORMAT TSV"]);
	is($r->{rc}, 52, 'lost: curl sees an empty reply (exit 52)');
	is(chq("SELECT count() FROM $db.f WHERE s = 'lost row'")->{body}, "1\n",
		'lost: the row was inserted anyway');
}

# delay: the statement runs after ms, in the engine (a SELECT that sleeps
# carries its text), so system.processes shows it meanwhile.  Seen by what
# can be observed, not by timing: while GET /running says `delaying` the
# INSERT has not run (its row is absent, system.processes lists the
# sleep under the client's query_id); then it runs by itself.
{
	my $qid = "delay-$db";
	ctl('/fault', pattern => "delay_marker_$$", mode => 'delay', ms => 3000);
	my ($cmd, $hf, $bf) = curl_cmd(body => "INSERT INTO $db.f SELECT 4, 'delay_marker_$$'",
		params => [query_id => $qid]);
	my $pid = open(my $out, '-|', @$cmd) // die "fork: $!";
	my $delaying = 0;
	for (1 .. 3000) {
		$delaying = ctl('/running')->{body} =~ /^\Q$qid\E\t[^\t]*\tdelaying\t/m;
		last if $delaying;
	}
	ok($delaying, 'delay: GET /running shows the statement delaying');
	is(chq("SELECT count() FROM $db.f WHERE s = 'delay_marker_$$'")->{body}, "0\n",
		'delay: meanwhile it has not run');
	is(chq("SELECT count() FROM system.processes WHERE query_id = '$qid'")->{body}, "1\n",
		'delay: system.processes lists it under its query_id');
	my $code = <$out> // 0;
	close($out);
	my $r = parse_reply($? >> 8, $code, $hf, $bf);
	is($r->{status}, 200, 'delay: then it answers 200 by itself');
	is(chq("SELECT count() FROM $db.f WHERE s = 'delay_marker_$$'")->{body}, "1\n",
		'delay: having run once');
}

# /sockets counts every TCP connection the main port accepts.
{
	my ($before) = ctl('/sockets')->{body} =~ /^accepted\t(\d+)$/m;
	http(url => "$url/ping", auth => 'none');
	http(url => "$url/ping", auth => 'none');
	my ($after) = ctl('/sockets')->{body} =~ /^accepted\t(\d+)$/m;
	is($after - $before, 2, 'GET /sockets: two requests on two connections, two accepted');
}

# hold: the statement waits until released; a client that gives up does not
# stop it, as on the server.
{
	ctl('/fault', pattern => "$db.f", mode => 'hold');
	my $r = http(body => "3\tslow row\n", max_time => 1,
		params => [query => "INSERT INTO $db.f FORMAT TSV"]);
	is($r->{rc}, 28, 'hold: curl --max-time times out (exit 28)');
	like(ctl('/running')->{body}, qr/\tholding\t\d+\tINSERT INTO \Q$db\E\.f FORMAT TSV\n/,
		'hold: GET /running lists the held INSERT');
	is(ctl('/release', pattern => "$db.f")->{body}, "1\n", 'hold: POST /release releases it');
	my $n = '';
	for (1 .. 300) {
		$n = chq("SELECT count() FROM $db.f WHERE s = 'slow row'")->{body};
		last if $n eq "1\n";
		last unless ctl('/running')->{body} =~ /\Q$db\E\.f FORMAT TSV/;
	}
	is(chq("SELECT count() FROM $db.f WHERE s = 'slow row'")->{body}, "1\n",
		'hold: the statement ran once released');
	is(ctl('/release', pattern => "$db.f")->{body}, "0\n", 'hold: nothing is left to release');
}

# Wait until GET /running shows a statement under query_id $qid (in
# phase $phase, if given).
sub wait_running_qid {
	my ($qid, $phase) = @_;
	$phase //= '';
	for (1 .. 3000) {
		return 1 if ctl('/running')->{body} =~ /^\Q$qid\E\t[^\t]*\t\Q$phase\E/m;
	}
	return 0;
}

# stubborn: a statement that ignores cancellation, as the server's INSERT
# that has its data or its EXCHANGE once they run.  KILL QUERY ... ASYNC
# answers at once and it goes on; KILL QUERY ... SYNC answers only once it
# has ended; an INSERT completes after its client gave up.
{
	ok_q("CREATE TABLE $db.stb (n UInt32) ENGINE = MergeTree ORDER BY n", 'create the stubborn table');
	ctl('/fault', pattern => "INSERT INTO $db.stb", mode => 'stubborn');
	my $qid = "stubborn-$db";
	my $r = http(body => "1\n2\n3\n", max_time => 2,
		params => [query => "INSERT INTO $db.stb FORMAT TSV", query_id => $qid]);
	is($r->{rc}, 28, 'stubborn: the client gives up (curl --max-time, exit 28)');
	ok(wait_running_qid($qid, 'holding'), 'stubborn: the INSERT, its rows in, still runs on the server');
	is(chq("SELECT count() FROM system.processes WHERE query_id = '$qid'")->{body}, "1\n",
		'stubborn: system.processes lists it');
	my $k = chq("KILL QUERY WHERE query_id = '$qid' ASYNC");
	is($k->{status}, 200, 'stubborn: KILL QUERY ... ASYNC answers');
	like($k->{body}, qr/\Awaiting\t\Q$qid\E\t[^\t\n]*\t[^\t\n]*INSERT INTO \Q$db\E\.stb[^\n]*\n\z/,
		'stubborn: with one row for it, kill_status waiting, as the server\'s (the cancel was sent)');
	ok(wait_running_qid($qid, 'holding'), 'stubborn: and the INSERT goes on');
	my ($cmd, $hf, $bf) = curl_cmd(body => "KILL QUERY WHERE query_id = '$qid' SYNC",
		params => [query_id => "sync-killer-$db"]);
	my $pid = open(my $out, '-|', @$cmd) // die "fork: $!";
	ok(wait_running_qid("sync-killer-$db"), 'stubborn: KILL QUERY ... SYNC waits on the server');
	is(chq("SELECT count() FROM $db.stb")->{body}, "0\n", 'stubborn: meanwhile no row is in');
	is(ctl('/release', pattern => "INSERT INTO $db.stb")->{body}, "1\n", 'stubborn: released');
	my $code = <$out> // 0;
	close($out);
	my $sync = parse_reply($? >> 8, $code, $hf, $bf);
	is($sync->{status}, 200, 'stubborn: then KILL QUERY ... SYNC answers');
	like($sync->{body}, qr/\Afinished\t\Q$qid\E\t[^\t\n]*\t[^\t\n]*INSERT INTO \Q$db\E\.stb[^\n]*\n\z/,
		'stubborn: with one row for it, kill_status finished, as the server\'s');
	is(chq("SELECT count() FROM $db.stb")->{body}, "3\n",
		'stubborn: the INSERT completed after its client gave up: its three rows are in');
	like(ctl('/log')->{body}, qr/\t\Q$qid\E\t\Q$user\E\t200\tINSERT INTO \Q$db\E\.stb FORMAT TSV\n/,
		'stubborn: and was answered 200, to nobody');
	# the log is in the order of the answers
	my %at = map { my @f = split /\t/; ($f[2] => $f[0]) } split /\n/, ctl('/log')->{body};
	ok($at{$qid} && $at{"sync-killer-$db"} && $at{$qid} < $at{"sync-killer-$db"},
		'stubborn: KILL QUERY ... SYNC answered after the INSERT had ended');
}

# hold_reply: the statement runs and leaves system.processes; its answer
# waits until released.
{
	my $qid = "hold-reply-$db";
	ctl('/fault', pattern => "hold_reply_$$", mode => 'hold_reply');
	my ($cmd, $hf, $bf) = curl_cmd(body => "INSERT INTO $db.f SELECT 7, 'hold_reply_$$'",
		params => [query_id => $qid]);
	my $pid = open(my $out, '-|', @$cmd) // die "fork: $!";
	my $held = 0;
	for (1 .. 3000) {
		$held = ctl('/holds')->{body} =~ /\tINSERT INTO \Q$db\E\.f SELECT 7, 'hold_reply_$$'\n/;
		last if $held;
	}
	ok($held, 'hold_reply: GET /holds lists the held answer');
	is(chq("SELECT count() FROM $db.f WHERE s = 'hold_reply_$$'")->{body}, "1\n",
		'hold_reply: the statement has run');
	is(chq("SELECT count() FROM system.processes WHERE query_id = '$qid'")->{body}, "0\n",
		'hold_reply: and left system.processes');
	is(ctl('/release', pattern => "hold_reply_$$")->{body}, "1\n", 'hold_reply: released');
	my $code = <$out> // 0;
	close($out);
	is(parse_reply($? >> 8, $code, $hf, $bf)->{status}, 200, 'hold_reply: then it answers 200');
}

# refuse: the next N connections are closed at accept.
{
	ctl('/fault', mode => 'refuse', count => 1);
	my $r = http(url => "$url/ping", auth => 'none');
	ok(grep({ $r->{rc} == $_ } 7, 52, 56),
		"refuse: connection refused/reset (curl exit $r->{rc})");
	$r = http(url => "$url/ping", auth => 'none');
	is($r->{status}, 200, 'refuse: only count connections are refused');
}

# the query log
{
	my $log = ctl('/log')->{body};
	my @lines = split /\n/, $log;
	ok(@lines > 10, 'the log lists queries');
	my ($last) = $lines[-1] =~ /^(\d+)\t/;
	ok($last, 'log lines start with a sequence number');

	my $qid = "log-$db";
	chq("SELECT\t'log\\\\me'\n", params => [query_id => $qid]);
	chq('SELEC broken', params => [query_id => "$qid-bad"]);
	my $since = ctl('/log', since => $last)->{body};
	my @new = split /\n/, $since;
	ok(@new >= 2 && !grep({ (split /\t/)[0] <= $last } @new),
		'since=K returns only later lines');
	my ($line) = grep { (split /\t/)[2] eq $qid } @new;
	ok($line, 'our query is in the log by its query_id');
	my @f = split /\t/, $line // '';
	is(scalar @f, 6, 'six tab-separated fields');
	like($f[1], qr/^\d{13}$/, 'unix time in ms');
	is($f[3], $user, 'user');
	is($f[4], '200', 'HTTP status');
	is($f[5], q(SELECT\t'log\\\\\\\\me'\n), 'query text with \\, tab, newline escaped');
	my ($bad) = grep { (split /\t/)[2] eq "$qid-bad" } @new;
	is((split /\t/, $bad // '')[4], '400', 'failed query logged with its status');
	ok(grep({ /\tlost\t/ } @lines), 'lost answers are logged as lost');
	like(ctl('/log')->{body}, qr/\trefused\t/, 'refused connections are logged');
}

# ---------------------------------------------------------------------
# Query ids (docs/endpoint.md, "Query ids")
# ---------------------------------------------------------------------

# A statement held on the server, in the background: returns a function
# that waits for its answer.
sub held {
	my ($marker, $qid, $mode) = @_;
	ctl('/fault', pattern => $marker, mode => $mode // 'hold');
	my ($cmd, $hf, $bf) = curl_cmd(body => "SELECT '$marker'",
		params => [query_id => $qid]);
	my $pid = open(my $out, '-|', @$cmd) // die "fork: $!";
	for (1 .. 3000) {
		last if ctl('/running')->{body} =~ /\tholding\t\d+\tSELECT '\Q$marker\E'/;
	}
	return sub {
		my $code = <$out> // 0;
		close($out);
		return parse_reply($? >> 8, $code, $hf, $bf);
	};
}

is(ctl('/query_ids')->{body}, "visible\n", 'query ids: the endpoint starts in the visible mode');
{
	my $qid = "visible-$db";
	my $wait = held("qid_v_$$", $qid);
	is(chq("SELECT query_id, initial_query_id, query LIKE '%qid_v_$$%' FROM system.processes"
		. " WHERE query_id = '$qid'")->{body}, "$qid\t$qid\t1\n",
		'visible: system.processes lists the statement under the client\'s query_id');
	is(chq("SELECT count() FROM system.processes AS p WHERE p.query_id = '$qid'")->{body}, "1\n",
		'visible: also read with an alias');
	is(chq('SELECT queryID(), initialQueryID()', params => [query_id => "own-$db"])->{body},
		"own-$db\town-$db\n", 'visible: queryID() is the client\'s query_id');
	my $dup = chq('SELECT 1', params => [query_id => $qid]);
	is($dup->{headers}{'x-clickhouse-exception-code'}, 216,
		'visible: a second statement under a running query_id is refused (216)');
	like($dup->{body}, qr/^Code: 216\. DB::Exception: Query with id = \Q$qid\E is already running\. \(QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING\)/,
		'visible: ... with the server\'s message');
	my $kill = chq("KILL QUERY WHERE query_id = '$qid' AND query_id != queryID() SYNC",
		params => [query_id => "killer-$db"]);
	is($kill->{status}, 200, 'visible: KILL QUERY WHERE query_id = ... SYNC');
	is($kill->{body}, "finished\t$qid\tdefault\tSELECT \\'qid_v_$$\\'\n",
		'visible: its row names the statement by the client\'s query_id and text, finished');
	my $r = $wait->();
	is($r->{headers}{'x-clickhouse-exception-code'}, 394, 'visible: the killed statement fails (394)');
	is(ctl('/release', pattern => "qid_v_$$")->{body}, "0\n", 'visible: it was not left holding');
	is(chq("SELECT count() FROM system.processes WHERE query_id = '$qid'")->{body}, "0\n",
		'visible: and is gone from system.processes');
	like(ctl('/log')->{body}, qr/\t\Q$qid\E\t\Q$user\E\t500\tSELECT 'qid_v_$$'\n/,
		'visible: the query log has it, answered 500');
}

is(http(url => "$ctl/query_ids", params => [mode => 'hidden'], post => 1, auth => 'none')->{body},
	"hidden\n", 'query ids: POST /query_ids?mode=hidden');
{
	my $qid = "hidden-$db";
	my $wait = held("qid_h_$$", $qid);
	is(chq("SELECT count() FROM system.processes WHERE query_id = '$qid'")->{body}, "0\n",
		'hidden: system.processes does not know the client\'s query_id');
	is(chq("SELECT count() FROM system.processes WHERE query LIKE '%qid_h_$$%' AND query_id != queryID()")->{body},
		"1\n", 'hidden: the statement is there under an id of the engine\'s, with its text');
	isnt(chq('SELECT queryID()', params => [query_id => "own-h-$db"])->{body}, "own-h-$db\n",
		'hidden: queryID() is not the client\'s query_id');
	is(chq('SELECT 1', params => [query_id => $qid])->{status}, 200,
		'hidden: a second statement under the same query_id runs');
	is(chq("KILL QUERY WHERE query_id = '$qid' SYNC")->{status}, 200, 'hidden: KILL by query_id');
	is(ctl('/release', pattern => "qid_h_$$")->{body}, "1\n", 'hidden: finds nothing to kill');
	is($wait->()->{body}, "qid_h_$$\n", 'hidden: the statement ran once released');
}
http(url => "$ctl/query_ids", params => [mode => 'visible'], post => 1, auth => 'none');

# ---------------------------------------------------------------------
# A failure after "200 OK" (mode=midstream)
# ---------------------------------------------------------------------
{
	ctl('/fault', pattern => "mid_t_$$", mode => 'midstream', code => 241);
	my $r = chq("SELECT number, 'mid_t_$$' FROM numbers(10)");
	is($r->{status}, 200, 'midstream: the answer starts as 200 OK');
	is($r->{rc}, 18, 'midstream: and breaks off without its last chunk (curl exit 18)');
	my $t = $r->{headers}{'x-clickhouse-exception-tag'} // '';
	like($t, qr/^[a-z0-9]{16}$/, 'midstream: X-ClickHouse-Exception-Tag names a tag');
	like($r->{body}, qr/\A(?:\d+\tmid_t_$$\n)+\r\n__exception__\r\n\Q$t\E\r\n(Code: 241\. DB::Exception: injected fault \(pattern 'mid_t_$$', mode midstream\)\. \(MEMORY_LIMIT_EXCEEDED\) \(version [^\n]+\)\n)(\d+) \Q$t\E\r\n__exception__\r\n\z/,
		'midstream: whole rows, then the tagged exception block');
	my ($msg, $len) = $r->{body} =~ /\r\n\Q$t\E\r\n(.*\n)(\d+) /s;
	is($len, length($msg // ''), 'midstream: the block gives the message\'s length');
	unlike($r->{body}, qr/9\tmid_t_/, 'midstream: the rows after the failure are not sent');

	ctl('/fault', pattern => "mid_m_$$", mode => 'midstream', code => 241, form => 'marker');
	$r = chq("SELECT number, 'mid_m_$$' FROM numbers(10)");
	ok(!defined $r->{headers}{'x-clickhouse-exception-tag'}, 'midstream (marker): no tag, as before 25.11');
	like($r->{body}, qr/\A(?:\d+\tmid_m_$$\n)+__exception__\r\nCode: 241\. DB::Exception: injected fault [^\n]+\n\z/,
		'midstream (marker): whole rows, the marker line, the message');
}

# ---------------------------------------------------------------------
# Connections the server closes while idle (mode=idle_close)
# ---------------------------------------------------------------------
{
	# curl sends both requests on one kept-alive connection.  Its body
	# comes from memory (-d), so when the server drops the second request
	# curl sends it again by itself on a new connection.
	my $seq = (ctl('/log')->{body} =~ /(\d+)\t[^\n]*\n\z/)[0];
	ctl('/fault', pattern => "idle_$$", mode => 'idle_close', ms => 0);
	my ($out, $rc);
	open(my $fh, '-|', 'curl', '-s', '-u', "$user:$pass", '-d', 'SELECT 1', "$url/?query_id=first-$db",
		'--next', '-s', '-u', "$user:$pass", '-d', "SELECT 'idle_$$'", "$url/?query_id=second-$db") or die;
	{ local $/; $out = <$fh>; }
	close($fh);
	is($out, "1\nidle_$$\n", 'idle_close: curl got both answers');
	my @second = grep { (split /\t/)[2] eq "second-$db" } split /\n/, ctl('/log', since => $seq)->{body};
	is(join(',', map { (split /\t/)[4] } @second), 'idle-closed,200',
		'idle_close: the request on the reused connection was dropped, curl\'s resend ran');
	# A kept-alive connection after one request shows as idle.
	my ($host, $port) = $url =~ m{^http://([^:/]+):(\d+)};
	my $sock = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port, Proto => 'tcp') or die $!;
	print $sock "GET /ping HTTP/1.1\r\nHost: $host\r\n\r\n";
	my $got = '';
	while ($got !~ /Ok\.\n\z/ && defined(my $line = <$sock>)) {
		$got .= $line;
	}
	like(ctl('/connections')->{body}, qr/^\d+\tidle\t\d+\t1\n/m,
		'GET /connections lists the kept-alive connection as idle after one request');
	close($sock);
}

# ---------------------------------------------------------------------
# Accounts: the engine roles granted to `default` (test/ch_config.sh)
# ---------------------------------------------------------------------
{
	my $r = chq('SELECT currentRoles()', auth => ['dpwin_refresh', $pass, 'basic']);
	is($r->{body}, "['dpwin_refresh']\n", 'accounts: a role is an account and runs with that role only');
	$r = chq("CREATE DATABASE ${db}_denied", auth => ['dpwin_refresh', $pass, 'basic']);
	is($r->{status}, 403, 'accounts: beyond the role\'s grants: 403');
	like($r->{body}, qr/^Code: 497\. DB::Exception: dpwin_refresh: Not enough privileges\./,
		'accounts: the message names the account, as the server names its user');
	is(chq('SELECT 1', auth => ['dpwin_refresh', "$pass-x", 'basic'])->{status}, 403,
		'accounts: with the --password only');
}

# The server's messages end with its version; every query answer names an
# exception tag (since 25.11).
{
	my $r = chq('SELEC 1');
	like($r->{body}, qr/\(SYNTAX_ERROR\) \(version \d+\.\d+\.\d+\.\d+ \(official build\)\)\n\z/,
		'errors end with the version');
	like(chq('SELECT 1')->{headers}{'x-clickhouse-exception-tag'} // '', qr/^[a-z0-9]{16}$/,
		'answers carry X-ClickHouse-Exception-Tag');
}

# ---------------------------------------------------------------------
# Shutdown (docs/endpoint.md, "Fidelity ledger"): as a server's shutdown
# cancels every query and answers each with its error (394) while its
# connections finish, the endpoint's stop answers the statements it
# cancelled; hold_vanish, the gentle variant, is dropped unanswered.
# ---------------------------------------------------------------------
SKIP: {
	skip 'a restart needs the sandbox (DPWIN_SANDBOX)', 9 unless $ENV{DPWIN_SANDBOX};
	require DpwinCrash;
	my ($answered, $vanished) = ("shut_answer_$$", "shut_vanish_$$");
	my $wait_answered = held($answered, "$answered-q");
	my $wait_vanished = held($vanished, "$vanished-q", 'hold_vanish');
	like(ctl('/running')->{body}, qr/\tholding\t\d+\tSELECT '\Q$vanished\E'/,
		'shutdown: both statements are held on the server');
	DpwinCrash::sandbox_cmd('restart-ch');
	my $r = $wait_answered->();
	is($r->{status}, 500, 'shutdown: the statement the stop cancelled is answered, 500');
	is($r->{headers}{'x-clickhouse-exception-code'}, 394, 'shutdown: with code 394');
	like($r->{body}, qr/^Code: 394\. DB::Exception: Query was cancelled\. \(QUERY_WAS_CANCELLED\)/,
		'shutdown: and the server\'s message');
	$r = $wait_vanished->();
	is($r->{status}, 0, 'hold_vanish: the stop closes its connection without an answer');
	is($r->{rc}, 52, 'hold_vanish: curl sees an empty reply (exit 52)');
	my %st;
	for my $l (split /\n/, read_file("$ENV{DPWIN_SANDBOX}/ch_queries.log")) {
		my @f = split /\t/, $l, 6;
		$st{ $f[2] } = $f[4] if @f == 6;
	}
	is($st{"$answered-q"}, '500', 'shutdown: the query log has it answered 500');
	is($st{"$vanished-q"}, 'shutdown', 'hold_vanish: the query log has it dropped by the stop');
	is(chq('SELECT 1')->{body}, "1\n", 'shutdown: the endpoint is back');
}

ctl('/faults/clear');
ok_q("DROP DATABASE $db SYNC", 'drop the test database');

done_testing();
