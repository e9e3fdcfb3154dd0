# Kept-alive connections that the server closes while they are idle
# (src/chhttp.c).  A server closes an idle connection after its keep-alive
# timeout; a request sent on it just then never reaches the statement
# handler, and the client sees the connection die without an answer.  The
# endpoint's idle_close fault (docs/endpoint.md) drops the matching request
# when its connection had been idle at least ms milliseconds, as if the
# server's close had crossed it.
#   max_age   the server's keep-alive time is 6 s: dpwin never sends on a
#             connection idle for longer than 5 s (CURLOPT_MAXAGE_CONN), so
#             the coordinator's first statement after a long extraction goes
#             out on a new connection and the refresh completes;
#   race      the close crosses the coordinator's next statement on a
#             connection it just used: dpwin reports a lost reply and does
#             not let libcurl send the statement again by itself (a statement
#             whose reply was lost may have run: a silent resend would run it
#             twice); the refresh fails before publication, cleanly.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish);
use DpwinCrash;
use DpwinEndpoint qw(release wait_running connections faults_pending log_entries);

my $db = "t106_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);

# --- connections idle for longer than dpwin's maximum age are not reused -----------

{
	my $s = scenario('max_age');
	my $stg = "INSERT INTO `$db`.`$s->{prefix}stg_";
	# The re-admission's first statement, right after the extraction (the
	# server's version is read once per run).
	my $readmit = "SELECT 'D', engine, '', '', '', '', '' FROM system.databases WHERE name = '$db'";
	my $seq = ch_log_seq();
	fault(pattern => $stg, mode => 'hold', count => 2);
	fault(pattern => $readmit, mode => 'idle_close', ms => 6000, count => 1);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_running(qr/^\Q$stg\E/, 2, phase => 'holding'), 'max_age: two staging INSERTs are held');
	ok(wait_until(sub { grep { $_->{state} eq 'idle' && $_->{idle_ms} >= 6500 } connections() }, 60),
		'max_age: the coordinator\'s connection has been idle for longer than the server keeps it');
	is(release($stg), 2, 'max_age: the INSERTs are released');
	my ($rc, $out, $err) = bg_finish($h);
	is($out, 'completed', 'max_age: the refresh completes') or diag($err);
	is(scalar(grep { $_->{status} eq 'idle-closed' } log_entries($seq)), 0,
		'max_age: no statement was sent on a connection the server had closed');
	is(scalar(grep { /^idle_close\t1\t/ } faults_pending()), 1, 'max_age: the idle_close fault is still pending');
	ch_control('POST', '/faults/clear');
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	settle_and_check($s, 'recover');
}

# --- the server's close crosses a statement on a reused connection ----------------

{
	my $s = scenario('race');
	# The attach of the staged parts: a statement whose loss fails the
	# refresh (the clone made during extraction is only a head start, made
	# again when it fails).
	my $create = "ALTER TABLE `$db`.`$s->{prefix}gen` ATTACH PARTITION ID 'all' FROM `$db`.`$s->{prefix}stg_";
	my $seq = ch_log_seq();
	fault(pattern => $create, mode => 'idle_close', ms => 0, count => 1);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	like($err, qr/^08006: lost the connection to ClickHouse server "sandbox_ch" while (running "ALTER TABLE |attaching partitions)/,
		'race: the refresh fails with a lost reply') or diag($err);
	my @creates = grep { index($_->{query}, $create) == 0 } log_entries($seq);
	is(join(',', map { $_->{status} } @creates), 'idle-closed',
		'race: the ATTACH reached the server once, on the connection the server closed');
	is(scalar(grep { $_->{query_id} eq $creates[0]{query_id} } log_entries($seq)), 1,
		'race: it was not sent again under its query_id (no silent resend)');
	check_after_fault($s, which => 'old', state => 'failed', outcome => '');
	settle_and_check($s, 'failed');
}

crash_teardown();
done_testing();
