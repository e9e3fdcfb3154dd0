# The ClickHouse transport and client (src/chhttp.c, src/chclient.c),
# driven from SQL through dpwin_test.ch_query(server, sql) (and
# dpwin_test.ch_query_started(), a statement waited for later): answers, the
# SQLSTATE of each failure class (an exception inside a 200 answer among
# them), settings sent with every request, and that the password never
# shows up in an error.  Statements that must outlive a client timeout are
# holds (docs/endpoint.md): they run until released, so no check races a
# timer.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(pg_literal fault bg_psql bg_finish hold_session release_session);
use DpwinEndpoint qw(release wait_running log_entries wait_logged);
use IO::Socket::INET;

my $url = $ENV{DPWIN_CH_URL};
my $user = $ENV{DPWIN_CH_USER};
my $password = $ENV{DPWIN_CH_PASSWORD};

# a URL-safe marker unique to this run, to aim faults at our statements
my $tag = "t010_$$";

sub make_server
{
	my ($name, $server_url, $pw, %opt) = @_;
	my $opts = "url " . pg_literal($server_url);
	$opts .= ", request_timeout " . pg_literal($opt{request_timeout})
	  if defined $opt{request_timeout};
	$opts .= ", connect_timeout " . pg_literal($opt{connect_timeout})
	  if defined $opt{connect_timeout};
	psql_ok("DROP SERVER IF EXISTS $name CASCADE;
		CREATE SERVER $name FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS ($opts);
		CREATE USER MAPPING FOR CURRENT_USER SERVER $name
			OPTIONS (user " . pg_literal($user) . ", password " . pg_literal($pw) . ");");
}

# the answer without its final newline (psql adds its own)
sub chq
{
	my ($server, $sql) = @_;
	return "SELECT rtrim(dpwin_test.ch_query(" . pg_literal($server) . ", "
	  . pg_literal($sql) . "), E'\\n')";
}

# everything psql printed for a failing call (message, detail, hint, context)
sub full_error
{
	my ($sql, %opt) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\n" . $sql, %opt);
	return $rc ? $err : '';
}

my $srv = "t010_ch";
my $srv_bad = "t010_badpw";
my $srv_refused = "t010_refused";
my $srv_short = "t010_short";

make_server($srv, $url, $password);

# --- answers ---------------------------------------------------------------

is(psql_ok(chq($srv, 'SELECT 40 + 2')), '42', 'a SELECT answers through the client');

is(psql_ok(chq($srv, "SELECT 'a\\tb', NULL, 'x\\\\y'")),
	"a\\tb\t\\N\tx\\\\y",
	'TabSeparated answer comes back raw, NULL as \\N');

is(psql_ok(chq($srv, "SELECT toDateTime64('2026-09-09 01:02:03.5', 6, 'UTC')")),
	'2026-09-09T01:02:03.500000Z',
	'date_time_output_format=iso is sent: timestamps are unambiguous UTC');

is(psql_ok(chq($srv, "SELECT getSetting('async_insert'), getSetting('insert_deduplicate')")),
	"false\tfalse",
	'async_insert=0 and insert_deduplicate=0 are sent with every request');

# a statement longer than any URL limit goes in the request body
{
	my $x = 'x' x 200_000;
	is(psql_ok(chq($srv, "SELECT length('$x')")),
		'200000', 'a 200 kB statement is sent as the request body');
}

# query ids are prefix + label + sequence, [A-Za-z0-9_-] only
{
	my $seq = ch_log_seq();
	psql_ok(chq($srv, "SELECT 'qid_$tag'"));
	my @rows = grep { $_->{query} =~ /qid_$tag/ } ch_log_since($seq);
	ok(@rows >= 1, 'the endpoint logged the statement');
	like($rows[0]{query_id} // '', qr/^dpwin-test-q-\d+$/,
		'query_id is prefix, label and sequence number');
}

# --- server errors -----------------------------------------------------------

{
	my $e = psql_err(chq($srv, 'SELEC 1'));
	like($e, qr/^HV000: ClickHouse error 62 while running "SELEC 1"/,
		'syntax error: SQLSTATE HV000 with the ClickHouse code in the message');
	my ($code, $raw) = ch('SELEC 1');
	like($raw, qr/\(SYNTAX_ERROR\) \(version \d+\.\d+\.\d+\.\d+ \(official build\)\)\n\z/,
		'the server ends its message with its version');
	my $full = full_error(chq($srv, 'SELEC 1'));
	like($full, qr/DETAIL:\s+.*Syntax error/, 'the server message is the detail');
	unlike($full, qr/\(version /, 'the version/stack tail is trimmed');
	like($full, qr/CONTEXT:\s+ClickHouse server "$srv", HTTP status 400, exception code 62, query_id dpwin-test-q-\d+/,
		'context names server, HTTP status, exception code and query_id');
}

{
	fault(pattern => "err_$tag", count => 1, mode => 'error', code => 241);
	my $e = psql_err(chq($srv, "SELECT 'err_$tag'"));
	like($e, qr/^HV000: ClickHouse error 241 /, 'an injected server error maps to HV000');
	is(psql_ok(chq($srv, "SELECT 'err_$tag'")), "err_$tag",
		'the fault was consumed and the next request succeeds');
}

# A server that fails after it sent "200 OK" and part of the result writes
# the exception into the body and breaks the connection: since 25.11 in a
# block framed with the tag of X-ClickHouse-Exception-Tag, before that
# after a line "__exception__".  Either is a server error with its code,
# not a lost reply, and the rows before it are not an answer.
for my $form ('tagged', 'marker')
{
	my $seq = ch_log_seq();
	fault(pattern => "mid_${form}_$tag", count => 1, mode => 'midstream', code => 241, form => $form);
	my $full = full_error(chq($srv, "SELECT number, 'mid_${form}_$tag' FROM numbers(100)"));
	is((grep { $_->{query} =~ /mid_${form}_$tag/ } log_entries($seq))[0]{status}, '200+exception',
		"exception after 200 ($form): the endpoint sent part of the rows, then the exception");
	like($full, qr/ERROR:\s+HV000: ClickHouse error 241 while running "SELECT number, 'mid_${form}_/,
		"exception after 200 ($form): a server error with the exception's code") or diag($full);
	like($full, qr/DETAIL:\s+injected fault \(pattern 'mid_${form}_\Q$tag\E', mode midstream\)\. \(MEMORY_LIMIT_EXCEEDED\)\n/,
		"exception after 200 ($form): the exception's message is the detail, without the rows before it");
	like($full, qr/CONTEXT:\s+ClickHouse server "$srv", HTTP status 200, exception code 241/,
		"exception after 200 ($form): the context says status 200");
}

# --- authentication ------------------------------------------------------------

{
	my $wrong = "Wr0ng-pw-$$-" . int(rand(1e9));
	make_server($srv_bad, $url, $wrong);
	my $full = full_error(chq($srv_bad, 'SELECT 1'));
	like($full, qr/ERROR:\s+28000: ClickHouse server "$srv_bad" rejected the credentials/,
		'wrong password: SQLSTATE 28000');
	like($full, qr/HINT:\s+Check the user and password options/, 'with a hint');
	ok(index($full, $wrong) < 0, 'the wrong password never appears in the error');
	ok(index($full, $password) < 0, 'nor does the real one');
}

# --- transport failures ----------------------------------------------------------

{
	# a port nobody listens on: bind one, note it, close it
	my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
		Proto => 'tcp', Listen => 1) or die "cannot bind: $!";
	my $port = $sock->sockport;
	close $sock;
	make_server($srv_refused, "http://127.0.0.1:$port", $password);
	my $e = psql_err(chq($srv_refused, 'SELECT 1'));
	like($e, qr/^HV00N: could not connect to ClickHouse server "$srv_refused"/,
		'connection refused: SQLSTATE HV00N');
}

{
	fault(pattern => "lost_$tag", count => 1, mode => 'lost');
	my $full = full_error(chq($srv, "SELECT 'lost_$tag'"));
	like($full, qr/ERROR:\s+08006: lost the connection to ClickHouse server "$srv"/,
		'lost reply: SQLSTATE 08006');
	like($full, qr/may or may not have run/, 'the detail says the outcome is unknown');
	is(psql_ok(chq($srv, 'SELECT 7')), '7', 'a new connection is made after a lost reply');
}

{
	make_server($srv_short, $url, $password, request_timeout => '1000');
	fault(pattern => "slow_$tag", count => 1, mode => 'hold');
	my $e = psql_err(chq($srv_short, "SELECT 'slow_$tag'"));
	like($e, qr/^08006: ClickHouse server "$srv_short" did not answer in time/,
		'request timeout: SQLSTATE 08006');
	is(release("slow_$tag"), 1, 'the request timeout ended the wait while the statement still ran');
}

{
	fault(pattern => "cancel_$tag", count => 1, mode => 'hold');
	my $e = psql_err("SET statement_timeout = '500ms';\n" . chq($srv, "SELECT 'cancel_$tag'"));
	like($e, qr/^57014: /, 'statement_timeout during a request: SQLSTATE 57014');
	is(release("cancel_$tag"), 1, 'the request was abandoned while the statement still ran');
	is(psql_ok(chq($srv, 'SELECT 8')), '8', 'the next statement works');
}

# --- a statement started and waited for later --------------------------------------

# As a chunk worker digests a staging table while it loads the next chunk
# (dpwin_ch_start(), dpwin_ch_poll(), dpwin_ch_finish()).
sub chq_started
{
	my ($server, $sql, $work_ms, $poll, $gate) = @_;
	return "SELECT rtrim(dpwin_test.ch_query_started(" . pg_literal($server) . ", "
	  . pg_literal($sql) . ", $work_ms, " . ($poll // 1 ? 'true' : 'false') . ", " . ($gate // 0) . "), E'\\n')";
}

is(psql_ok(chq_started($srv, 'SELECT 40 + 2', 0)), '42', 'a started statement: its answer');

# The wait for a started statement begins 1.5 s after its start, past the
# server's 1 s request timeout, and only once the endpoint has sent the
# answer (a session holds the gate's advisory lock until its log shows
# that): the timeout counts from the wait, so the answer is read.
sub answer_read_late
{
	my ($n, $poll) = @_;
	my $gate = 1010_000 + $n;
	my $holder = hold_session("SELECT pg_advisory_lock($gate)");
	my $seq = ch_log_seq();
	my $h = bg_psql(chq_started($srv_short, "SELECT $n", 1500, $poll, $gate));
	my $sent = wait_logged($seq, qr/\bSELECT $n\b/, answered => 1);
	release_session($holder);
	my ($rc, $out, $err) = bg_finish($h);
	return $sent ? ($rc == 0 ? $out : $err) : 'the endpoint never answered';
}
is(answer_read_late(43, 1), '43',
	'an answer waited for 1.5 s after its start, moved on meanwhile, with a 1 s request timeout');
is(answer_read_late(44, 0), '44',
	'... and left alone meanwhile: an answer that arrived is read, however long after the start');
{
	fault(pattern => "slow_started_$tag", count => 1, mode => 'hold');
	my $e = psql_err(chq_started($srv_short, "SELECT 'slow_started_$tag'", 0));
	like($e, qr/^08006: ClickHouse server "$srv_short" did not answer in time/,
		'a started statement not answered within the request timeout of its wait: SQLSTATE 08006');
	is(release("slow_started_$tag"), 1, '... while the statement still ran');
}
{
	fault(pattern => "lost_started_$tag", count => 1, mode => 'lost');
	my $e = psql_err(chq_started($srv, "SELECT 'lost_started_$tag'", 200));
	like($e, qr/^08006: lost the connection to ClickHouse server "$srv"/,
		'a started statement whose reply was lost: SQLSTATE 08006');
}
{
	fault(pattern => "cancel_started_$tag", count => 1, mode => 'hold');
	my $e = psql_err("SET statement_timeout = '500ms';\n" . chq_started($srv, "SELECT 'cancel_started_$tag'", 0));
	like($e, qr/^57014: /, 'statement_timeout while waiting for a started statement: SQLSTATE 57014');
	is(release("cancel_started_$tag"), 1, '... the statement was abandoned while it still ran');
	is(psql_ok(chq_started($srv, 'SELECT 9', 0)), '9', 'the next started statement works');
}

# --- the query log -----------------------------------------------------------------

# The log gives a statement's text back as it was sent: a backslash before
# an n stays a backslash and an n, tabs and newlines come back as such
# (the endpoint escapes them; DpwinTest::ch_log_since undoes it).
{
	my $seq = ch_log_seq();
	my $sql = "SELECT 'log_text_$tag', 'a\\\\nb', '\t', '\n'";
	ch_ok($sql);
	my ($logged) = grep { index($_->{query}, "log_text_$tag") >= 0 } ch_log_since($seq);
	is($logged->{query} // 'not logged', $sql, 'the query log keeps backslashes, tabs and newlines');
}

# --- housekeeping ------------------------------------------------------------------

psql_ok("DROP SERVER IF EXISTS $_ CASCADE") for ($srv, $srv_bad, $srv_refused, $srv_short);

done_testing();
