# The crash matrix, part 4: the ClickHouse endpoint misbehaving.
#   refused       every connection refused when the refresh starts;
#   restart_xtr   the endpoint restarts while staging INSERTs run (data
#                 persists): the interrupted chunks are fenced and retried;
#   restart_pub   the endpoint restarts while the EXCHANGE waits on it: the
#                 EXCHANGE never runs, the invocation stays publishing;
#   ins_timeout   a staging INSERT outlives the server's request_timeout: the
#                 attempt is fenced and the chunk retried into a new table;
#   create_timeout  the same for the CREATE of a staging table, which runs
#                 after the refresh completed: recover() drops its table;
#   x_late        the EXCHANGE outlives request_timeout and runs later: dpwin
#                 must not exchange again while it may still run (the
#                 endpoint cannot show a client's query_id in
#                 system.processes, so settling cannot see it); the
#                 invocation stays publishing, and recover() settles it once
#                 the statement has ended;
#   x_never       the same, but the timed-out EXCHANGE never runs: recover()
#                 exchanges once;
#   x_rec_late    recover()'s own EXCHANGE times out and runs later: the same
#                 rule, a second recover() finishes it.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish exchange_re exchanges);
use DpwinCrash;
use Time::HiRes qw(usleep);

my $db = "t103_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);

# A foreign server for the same endpoint with a short request timeout.
my $slow = "${db}_slow";
psql_ok("CREATE SERVER $slow FOREIGN DATA WRAPPER dpwin_clickhouse"
	  . " OPTIONS (url '$ENV{DPWIN_CH_URL}', request_timeout '1500ms');
	CREATE USER MAPPING FOR CURRENT_USER SERVER $slow
	  OPTIONS (user '$ENV{DPWIN_CH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');");

sub exchange_fault
{
	my ($s, $ms) = @_;
	fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'delay', ms => $ms, count => 1);
}

# --- connection refused at start ---------------------------------------------------

{
	my $s = scenario('refused');
	fault(mode => 'refuse', count => 1000);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	ch_control('POST', '/faults/clear');
	like($err, qr/^08\w\w\w: /, 'refused: the refresh fails with a connection error') or diag($err);
	check_after_fault($s, which => 'old', state => 'failed', outcome => '');
	settle_and_check($s, 'failed');
}

# --- the endpoint restarts during extraction ------------------------------------------

{
	my $s = scenario('restart_xtr');
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'delay', ms => 3000, count => 2);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { chunks_in_state($s, 'running') == 2 }, 30),
		'restart_xtr: two chunks are being loaded');
	usleep(300_000);
	sandbox_cmd('restart-ch');
	my ($rc, $out, $err) = bg_finish($h);
	is($out, 'completed', 'restart_xtr: the refresh completes') or diag($err);
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	is(psql_ok("SELECT string_agg(attempt::text, ',' ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}'"),
		'1,1,0,0', 'restart_xtr: the two interrupted chunks were loaded again, into new staging tables');
	settle_and_check($s, 'recover');
}

# --- the endpoint restarts during publication ------------------------------------------

{
	my $s = scenario('restart_pub');
	exchange_fault($s, 6000);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 60), 'restart_pub: publishing');
	usleep(300_000);
	sandbox_cmd('restart-ch');
	my ($rc, $out, $err) = bg_finish($h);
	like($err, qr/HINT:.*dpwin\.recover\('\Q$s->{inv}\E'\)/, 'restart_pub: the refresh fails, naming recover()')
	  or diag($err);
	check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
	my $seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(exchanges($seq, $s->{t})), 1, 'restart_pub: recover exchanged once');
}

# --- a staging INSERT times out ---------------------------------------------------------

{
	my $s = scenario('ins_timeout', server => $slow);
	my $seq = ch_log_seq();
	my $stg = "$s->{prefix}stg_0_0";
	fault(pattern => "INSERT INTO `$db`.`$stg`", mode => 'delay', ms => 2500, count => 1);
	is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', 'ins_timeout: the refresh completes');
	# The timed-out INSERT still runs on the server; when it does, its
	# staging table has been dropped already.
	ok(wait_answered($seq, qr/^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/), 'ins_timeout: the timed-out INSERT has ended');
	is((grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/ } ch_log_since($seq))[0]{status}, '404',
		'ins_timeout: it found its attempt\'s staging table gone');
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
		'ins_timeout: chunk 0 was loaded by its second attempt');
	settle_and_check($s, 'recover');
}

# --- a staging CREATE times out and runs after the refresh completed ---------------------
#
# The late statement creates a table of the completed invocation after its
# clean-up: recover() of the completed invocation drops it.

{
	my $s = scenario('create_timeout', server => $slow);
	my $seq = ch_log_seq();
	my $stg = "$s->{prefix}stg_0_0";
	fault(pattern => "CREATE TABLE `$db`.`$stg`", mode => 'delay', ms => 5000, count => 1);
	is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', 'create_timeout: the refresh completes');
	is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
		'create_timeout: chunk 0 was loaded by its second attempt');
	ok(wait_answered($seq, qr/^CREATE TABLE `\Q$db\E`\.`\Q$stg\E`/), 'create_timeout: the timed-out CREATE has run');
	is_deeply(leftovers(), [$stg], 'create_timeout: and left its table behind');
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	settle_and_check($s, 'recover');
}

# --- the EXCHANGE times out and runs later ----------------------------------------------

{
	my $s = scenario('x_late', server => $slow);
	my $seq = ch_log_seq();
	exchange_fault($s, 2500);
	# Were dpwin to exchange again at once, its next statement (renaming the
	# old table to the backup) would run after the late EXCHANGE.
	fault(pattern => "RENAME TABLE `$db`.`$s->{prefix}gen`", mode => 'delay', ms => 1200, count => 1);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	like($err, qr/^08006: .*EXCHANGE/, 'x_late: the refresh fails: the EXCHANGE got no answer') or diag($err);
	is(scalar(exchanges($seq, $s->{t})), 0,
		'x_late: no second EXCHANGE was sent while the first may still run');
	ok(wait_answered($seq, exchange_re($s->{t})), 'x_late: the timed-out EXCHANGE has run');
	ch_control('POST', '/faults/clear');
	check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(exchanges($seq, $s->{t})), 0, 'x_late: recover sent no EXCHANGE');
}

# --- the EXCHANGE times out and never runs -----------------------------------------------

{
	my $s = scenario('x_never', server => $slow);
	exchange_fault($s, 8000);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	like($err, qr/^08006: .*EXCHANGE/, 'x_never: the refresh fails: the EXCHANGE got no answer') or diag($err);
	# The endpoint still holds the EXCHANGE: a restart drops it unrun.
	sandbox_cmd('restart-ch');
	check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
	my $seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(exchanges($seq, $s->{t})), 1, 'x_never: recover exchanged once');
}

# --- recover()'s own EXCHANGE times out and runs later ------------------------------------

{
	my $s = scenario('x_rec_late', server => $slow);
	exchange_fault($s, 8000);
	like(psql_err(refresh_sql($s->{route}, $E2, $s->{inv})), qr/^08006: .*EXCHANGE/,
		'x_rec_late: the refresh fails: the EXCHANGE got no answer');
	sandbox_cmd('restart-ch');
	my $seq = ch_log_seq();
	exchange_fault($s, 2500);
	like(psql_err("SELECT * FROM dpwin.recover('$s->{inv}')"), qr/^08006: .*EXCHANGE/,
		'x_rec_late: recover retries, and its EXCHANGE gets no answer either');
	is(scalar(exchanges($seq, $s->{t})), 0,
		'x_rec_late: recover did not exchange again');
	ok(wait_answered($seq, exchange_re($s->{t})), 'x_rec_late: its EXCHANGE has run');
	check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(exchanges($seq, $s->{t})), 0, 'x_rec_late: the second recover sent no EXCHANGE');
}

crash_teardown();
psql_ok("DROP SERVER $slow CASCADE");
done_testing();
