# Fidelity errors and request size bounds during extraction, against the
# real engine.
#
# * A value ClickHouse cannot hold exactly (a numeric with more decimals
#   than the Decimal scale, a timestamp with microseconds into
#   DateTime64(3)) stops the invocation before anything is published: the
#   SQLSTATE of docs/types.md, a message naming the column and the value,
#   a detail naming the row's window value, the target untouched, no
#   staging table left.
# * max_encoded_bytes = 65536 with rows of about 1 kB: each chunk of about
#   650 kB is sent as one INSERT (counted in the endpoint's query log),
#   its body handed over in pieces of at most the bound, and the data is
#   exact.  Every row's RowBinary starts with a byte the INSERT data-start
#   rule could swallow (0x09, 0x0A, 0x0C, 0x0D, 0x20), so every piece
#   starts with one.
# * Such a streamed INSERT answered with an error, or whose answer is
#   lost, fails its attempt, and the chunk is loaded again in a new one;
#   a caller cancelled while the server holds two of them gets 57014, the
#   connections are dropped mid-body, and nothing is left.
# * A single row larger than the bound fails with 54000, naming the row.
# * Empty chunks and an empty window, with quoted names and the route's
#   columns in another order than the table's.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture sorted_lines multiset_is uuid_of dpwin_tables_left
  fault invocation_prefix bg_psql bg_finish);
use DpwinEndpoint qw(wait_running running);

my $tag = "t053_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';

my $lo = '2026-07-01 00:00:00+00';
my $hi = '2026-07-02 00:00:00+00';
my $ch_in = "w >= toDateTime64('2026-07-01 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-07-02 00:00:00', 6, 'UTC')";

# The target's UUID and rows.
sub target_state
{
	my ($tbl, $ch_row) = @_;
	return (uuid_of($tbl), sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl`")));
}

# psql's whole error output for a failing statement
sub refresh_error
{
	my ($route) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\nSELECT state FROM dpwin_refresh('$route', '$hi')");
	return $rc ? $err : "succeeded: $out";
}

fresh_fixture($db, $schema);

# ---- fidelity errors ------------------------------------------------------

{
	my $src = "$schema.fid";
	my $route = "${tag}_fid";
	my $ch_row = "toString(id) || '|' || toString(amount) || '|' || toString(toUnixTimestamp64Micro(ts))";
	ch_ok("CREATE TABLE `$db`.`fid` (id Int64, w DateTime64(6, 'UTC'), amount Decimal(18, 2),"
		  . " ts DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY id");
	psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz NOT NULL, amount numeric(24,4) NOT NULL,
			ts timestamptz NOT NULL);
		INSERT INTO $src SELECT g, timestamptz '$lo' - interval '2 hours' + g * interval '10 seconds',
			g * 1.5, timestamptz '2026-01-01 00:00:00+00' + g * interval '1.001 seconds'
		  FROM generate_series(0, 9359) g;");
	psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', 'fid',
		interval '1 day', interval '3 hours', parallelism => 2)");
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi')"), 'completed',
		'values that fit: the refresh completes');
	my ($uuid, $rows) = target_state('fid', $ch_row);
	# every row of the window, rendered by each side on its own
	is_deeply(
		sorted_lines(ch_ok("SELECT toString(id) || '|' || toString(toInt64(amount * 100)) || '|'"
				  . " || toString(toUnixTimestamp64Micro(ts)) FROM `$db`.`fid`")),
		sorted_lines(psql_ok("SELECT id || '|' || (amount * 100)::bigint || '|' || (extract(epoch FROM ts) * 1000000)::bigint"
				  . " FROM $src WHERE w >= '$lo' AND w < '$hi'")),
		'the target holds exactly the source window\'s ' . scalar(@$rows) . ' rows');

	my @cases = (
		[ 'a numeric with more decimals than the Decimal scale',
			"amount = 123.456, w = '2026-07-01 19:30:00.25+00'",
			'22003', qr/value 123\.456\d* of column "amount" does not fit Decimal\(18, ?2\)/,
			qr/2026-07-01[ T]19:30:00\.25/ ],
		[ 'a numeric with more integer digits than the Decimal precision',
			"amount = 10000000000000000, w = '2026-07-01 20:00:00+00'",
			'22003', qr/value 10000000000000000(\.0+)? of column "amount"/,
			qr/2026-07-01[ T]20:00:00/ ],
		[ 'a timestamp with microseconds into DateTime64(3)',
			"ts = '2026-01-01 12:00:00.0005+00', w = '2026-07-01 21:15:00+00'",
			'22008', qr/value 2026-01-01[ T]12:00:00\.0005\S* of column "ts"/,
			qr/2026-07-01[ T]21:15:00/ ],
	);
	for my $c (@cases)
	{
		my ($label, $set, $state, $msg_re, $win_re) = @$c;
		psql_ok("UPDATE $src SET $set WHERE id = 7000");
		my $err = refresh_error($route);
		like($err, qr/ERROR:\s+$state: /, "$label: SQLSTATE $state");
		like($err, $msg_re, "$label: the message names the column and the value");
		like($err, qr/DETAIL:\s+Row with window value $win_re/, "$label: the detail names the row's window value");
		my $inv = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$route' ORDER BY created_at DESC LIMIT 1");
		is(psql_ok("SELECT state, error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"), "failed|$state",
			"$label: the invocation failed with $state");
		is(psql_ok("SELECT count(*) FROM dpwin.publication WHERE invocation_id = '$inv'"), 0,
			"$label: no publication was intended");
		my ($uuid_after, $rows_after) = target_state('fid', $ch_row);
		is($uuid_after, $uuid, "$label: the target is the same table");
		multiset_is($rows_after, $rows, "$label: the target rows are untouched");
		is(dpwin_tables_left(), 0, "$label: no staging or generation table left");
		psql_ok("UPDATE $src SET amount = id * 1.5, w = timestamptz '$lo' - interval '2 hours' + id * interval '10 seconds',
			ts = timestamptz '2026-01-01 00:00:00+00' + id * interval '1.001 seconds' WHERE id = 7000");
	}
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi')"), 'completed',
		'after the bad values are gone the refresh completes');
	psql_ok("SELECT dpwin.drop_route('$route')");
}

# ---- max_encoded_bytes ------------------------------------------------------

{
	my $src = "$schema.big";
	my $route = "${tag}_big";
	my $tbl = 'big';
	my $pg_row = "id::text || '|' || (extract(epoch FROM w) * 1000000)::bigint::text || '|' || encode(convert_to(v, 'UTF8'), 'hex')";
	my $ch_row = "toString(id) || '|' || toString(toUnixTimestamp64Micro(w)) || '|' || lower(hex(v))";
	ch_ok("CREATE TABLE `$db`.`$tbl` (id Int64, w DateTime64(6, 'UTC'), v String) ENGINE = MergeTree ORDER BY id");

	# ~1 kB rows; ids whose low byte is 0x09, 0x0A, 0x0C, 0x0D or 0x20.
	psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz NOT NULL, v text NOT NULL);
		INSERT INTO $src SELECT k * 256 + (ARRAY[9, 10, 12, 13, 32])[k % 5 + 1],
			timestamptz '$lo' + k * interval '33 seconds',
			repeat(chr(65 + k % 26), 900 + k % 200) || repeat('é', k % 7)
		  FROM generate_series(0, 2599) k;");
	my $route_id = psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', '$tbl',
		interval '1 day', interval '6 hours', parallelism => 2, batch_rows => 97, max_encoded_bytes => 65536)");

	my $seq = ch_log_seq();
	my ($state, $inv) = split /\|/, psql_ok("SELECT state, invocation_id FROM dpwin_refresh('$route', '$hi')");
	is($state, 'completed', 'max_encoded_bytes 65536, rows of ~1 kB: the refresh completes');
	my $exp = sorted_lines(psql_ok("SELECT $pg_row FROM $src WHERE w >= '$lo' AND w < '$hi'"));
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl` WHERE $ch_in")), $exp, 'the window is exact');

	my @log = ch_log_since($seq);
	for my $c (split /\n/, psql_ok("SELECT chunk_no || ' ' || bytes || ' ' || rows FROM dpwin.chunks WHERE invocation_id = '$inv' ORDER BY chunk_no"))
	{
		my ($chunk, $bytes, $nrows) = split / /, $c;
		my $n = grep { $_->{query} =~ /^INSERT INTO `[^`]*`\.`[^`]*_stg_${chunk}_0` \(.*\) FORMAT RowBinary/s } @log;
		my $ok = grep { $_->{status} eq '200' && $_->{query} =~ /^INSERT INTO `[^`]*`\.`[^`]*_stg_${chunk}_0` \(/s } @log;
		ok($n == 1 && $ok == 1 && $bytes > 8 * 65536,
			"chunk $chunk: $bytes bytes in $nrows rows sent as $n INSERT ($ok answered 200), in pieces of 64 kB");
	}

	# A streamed INSERT answered with an error, and one whose answer is
	# lost: each chunk is loaded again in a second attempt.
	$inv = psql_ok("SELECT gen_random_uuid()");
	my $pfx = invocation_prefix($route_id, $inv);
	fault(pattern => "${pfx}stg_1_0` (", mode => 'error', code => 1000, count => 1);
	fault(pattern => "${pfx}stg_2_0` (", mode => 'lost', count => 1);
	$seq = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi', '$inv')"), 'completed',
		'a streamed INSERT failed, another lost its answer: the refresh completes');
	is(psql_ok("SELECT string_agg(chunk_no || ':' || attempt, ' ' ORDER BY chunk_no) FROM dpwin.chunks"
		  . " WHERE invocation_id = '$inv' AND state = 'verified'"), '0:0 1:1 2:1 3:0',
		'... chunks 1 and 2 verified at their second attempt');
	# The two workers' INSERTs reach the log in either order: by chunk.
	my %status;
	for my $e (ch_log_since($seq))
	{
		push @{ $status{$1} }, $e->{status}
		  if $e->{query} =~ /^INSERT INTO `[^`]*`\.`\Q$pfx\Estg_([12])_0` \(/s;
	}
	is(join(' ', map { @{ $status{$_} // [] } } 1, 2),
		'500 lost', '... the first answered 500, the second ran and its answer was lost');
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl` WHERE $ch_in")), $exp, '... the window is exact');
	is(dpwin_tables_left(), 0, '... no staging or generation table left');

	# The caller cancelled while the server holds two streamed INSERTs.
	my ($uuid0, $rows0) = target_state($tbl, $ch_row);
	$inv = psql_ok("SELECT gen_random_uuid()");
	$pfx = invocation_prefix($route_id, $inv);
	fault(pattern => "INSERT INTO `$db`.`${pfx}stg_", mode => 'hold', count => 2);
	my $h = bg_psql("SELECT state FROM dpwin_refresh('$route', '$hi', '$inv')", "${tag}_caller");
	ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$pfx\Estg_/, 2, phase => 'holding'),
		'two streamed INSERTs are held on the server');
	is(psql_ok("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '${tag}_caller'"), 't',
		'the caller is cancelled');
	my ($rc, $out, $cerr) = bg_finish($h);
	like($cerr, qr/ERROR:\s+57014:/, '... and gets 57014');
	ok(wait_until(sub { psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$inv'") eq 'failed'
				  && scalar(grep { index($_->{query}, $pfx) >= 0 } running()) == 0 }, 60),
		'... the invocation failed and none of its statements runs on the server');
	my ($uuid1, $rows1) = target_state($tbl, $ch_row);
	is($uuid1, $uuid0, '... the target is the same table');
	multiset_is($rows1, $rows0, '... with the same rows');
	ok(wait_until(sub { dpwin_tables_left() == 0 }, 60), '... no staging or generation table left');

	# A streamed INSERT held past the request timeout (of a server whose
	# timeout only a held statement reaches): it is killed by its query_id
	# before the chunk is loaded again.
	my $slow = "${tag}_slow";
	psql_ok("CREATE SERVER $slow FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}', request_timeout '5s');
		CREATE USER MAPPING FOR CURRENT_USER SERVER $slow
		  OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');
		SELECT dpwin.alter_route('$route', server => '$slow');");
	$inv = psql_ok("SELECT gen_random_uuid()");
	$pfx = invocation_prefix($route_id, $inv);
	fault(pattern => "INSERT INTO `$db`.`${pfx}stg_0_0` (", mode => 'hold', count => 1);
	$seq = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi', '$inv')"), 'completed',
		'a streamed INSERT held past the request timeout: the refresh completes');
	is(psql_ok("SELECT attempt FROM dpwin.chunks WHERE invocation_id = '$inv' AND chunk_no = 0 AND state = 'verified'"), 1,
		'... chunk 0 verified at its second attempt');
	@log = ch_log_since($seq);
	my ($held) = grep { $_->{query} =~ /^INSERT INTO `[^`]*`\.`\Q$pfx\Estg_0_0` \(/s } @log;
	is($held ? $held->{status} : 'none', '500', '... the held one was killed');
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl` WHERE $ch_in")), $exp, '... the window is exact');
	psql_ok("SELECT dpwin.alter_route('$route', server => '$srv')");

	# One row larger than the bound.
	my ($uuid, $rows) = target_state($tbl, $ch_row);
	psql_ok("UPDATE $src SET v = repeat('x', 100000) WHERE id = 1300 * 256 + 9");
	my $w = psql_ok("SELECT to_char(w AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') FROM $src WHERE id = 1300 * 256 + 9");
	my $err = refresh_error($route);
	like($err, qr/ERROR:\s+54000: a row of chunk \d+ encodes to 100\d{3} bytes, more than max_encoded_bytes \(65536\)/,
		'a 100 kB row fails with 54000');
	like($err, qr/DETAIL:\s+Row with w = \Q$w\E/, "... naming the row by its window value ($w)");
	my ($uuid_after, $rows_after) = target_state($tbl, $ch_row);
	is($uuid_after, $uuid, 'the target is the same table');
	multiset_is($rows_after, $rows, 'the target rows are untouched');
	is(dpwin_tables_left(), 0, 'no staging or generation table left');

	psql_ok("SELECT dpwin.drop_route('$route')");
}

# ---- empty chunks, an empty window, columns in another order ----------------

{
	my $src = qq{$schema."Odd Src"};
	my $route = "${tag}_odd";
	my $pg_row = qq{COALESCE(encode(convert_to("Val ü", 'UTF8'), 'hex'), 'N') || '|' || id::text || '|'}
	  . qq{ || COALESCE((extract(epoch FROM "Wt") * 1000000)::bigint::text, 'N')};
	my $ch_row = "if(isNull(`Val ü`), 'N', lower(hex(assumeNotNull(`Val ü`)))) || '|' || toString(id) || '|'"
	  . " || if(isNull(`Wt`), 'N', toString(toUnixTimestamp64Micro(assumeNotNull(`Wt`))))";
	my $ch_in_odd = $ch_in =~ s/\bw\b/`Wt`/gr;
	my $ch_keep = "isNull(`Wt`) OR NOT ($ch_in_odd)";
	ch_ok("CREATE TABLE `$db`.`odd` (`Val ü` Nullable(String), id Int64, `Wt` Nullable(DateTime64(6, 'UTC')))"
		  . " ENGINE = MergeTree ORDER BY id");
	# the table's column order differs from the target's, and one column is not copied
	psql_ok(qq{CREATE TABLE $src ("Wt" timestamptz, skipped integer, id bigint NOT NULL, "Val ü" text);
		INSERT INTO $src SELECT timestamptz '$lo' + interval '6 hours' + g * interval '1 minute', g, g, 'v' || g
		  FROM generate_series(0, 299) g;
		INSERT INTO $src SELECT timestamptz '$lo' - g * interval '1 hour', g, 1000 + g, NULL FROM generate_series(1, 5) g;
		INSERT INTO $src SELECT NULL, g, 2000 + g, 'null window' FROM generate_series(1, 3) g;});
	psql_ok(qq{SELECT dpwin.create_route('$route', '$src', 'Wt', '$srv', '$db', 'odd',
		interval '1 day', interval '6 hours', parallelism => 3, columns => ARRAY['Val ü', 'id', 'Wt']::name[])});
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$lo')"), 'completed',
		'quoted names, reordered columns: the window before fills the target');
	my ($state, $inv) = split /\|/, psql_ok("SELECT state, invocation_id FROM dpwin_refresh('$route', '$hi')");
	is($state, 'completed', 'a window with three empty chunks of four: completed');
	is(psql_ok("SELECT string_agg(chunk_no || ':' || rows, ' ' ORDER BY chunk_no) FROM dpwin.chunks"
		  . " WHERE invocation_id = '$inv' AND state = 'verified'"), '0:0 1:300 2:0 3:0',
		'every chunk verified, the empty ones with 0 rows');
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_in_odd")),
		sorted_lines(psql_ok(qq{SELECT $pg_row FROM $src WHERE "Wt" >= '$lo' AND "Wt" < '$hi'})),
		'the window is exact, column by column in the route order');
	my $keep = sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_keep"));
	is(scalar(@$keep), 5, 'the rows before the window are there');

	# a NULL-window row in the target, then a window with no rows at all
	ch_ok("INSERT INTO `$db`.`odd` VALUES ('target only', 3000, NULL)");
	$keep = sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_keep"));
	psql_ok(qq{DELETE FROM $src WHERE "Wt" >= '$lo' AND "Wt" < '$hi'});
	($state, $inv) = split /\|/, psql_ok("SELECT state, invocation_id FROM dpwin_refresh('$route', '$hi')");
	is($state, 'completed', 'an empty window: completed');
	is(psql_ok("SELECT metrics->>'source_rows' FROM dpwin.evidence WHERE invocation_id = '$inv'"),
		0, '... with 0 source rows in its evidence');
	is(ch_ok("SELECT count() FROM `$db`.`odd` WHERE $ch_in_odd") + 0, 0, 'the target window is empty now');
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_keep")), $keep,
		'rows outside the window and NULL-window rows are kept');
	psql_ok("SELECT dpwin.drop_route('$route')");
}

drop_fixture();

done_testing();
