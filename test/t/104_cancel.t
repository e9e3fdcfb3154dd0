# The crash matrix, part 5: the caller of dpwin_refresh() is cancelled
# (pg_cancel_backend) or terminated (pg_terminate_backend):
#   during extraction: the invocation fails, its workers stop, its staging
#   tables are dropped, the target is untouched;
#   while the generation is built: the same, before any intent;
#   during publication (the EXCHANGE on its way): the coordinator finishes
#   the publication, evidence and state regardless, and completes.
# 052_extract_retries.t checks the chunk side of a cancel in more detail.
# The coordinator stops the invocation's statements still running on the
# server by their query_id, or by their text when the server does not show
# query ids: every case runs with the endpoint in both query_id modes
# (docs/endpoint.md, "Query ids").  Statements that must still run when the
# caller is interrupted are holds: they run until released or killed.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish);
use DpwinCrash;
use DpwinEndpoint qw(both_modes release wait_running running);

my $db = "t104_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);




sub none_held
{
	my ($s) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(scalar(grep { index($_->{query}, $s->{prefix}) >= 0 } running()), 0,
		"$s->{tag}: none of its statements is still running on the server");
}

both_modes(sub {
	my ($mode) = @_;
	my $m = substr($mode, 0, 1);

	for my $how ('cancel', 'terminate')
	{
		# --- during extraction ---------------------------------------------------------

		{
			my $s = scenario("${how}_xtr_$m");
			fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'hold', count => 4);
			my ($h, $pid) = start_caller($s);
			ok(wait_until(sub { chunks_in_state($s, 'running') == 2 }, 30),
				"$s->{tag}: two chunks are being loaded");
			ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/, 2, phase => 'holding'),
				"$s->{tag}: their INSERTs are on the server");
			interrupt_caller($s, $how, $h, $pid);
			wait_final($s);
			none_held($s);
			check_after_fault($s, which => 'old', state => 'failed', outcome => '');
			is(psql_ok("SELECT error_sqlstate FROM dpwin.invocation WHERE invocation_id = '$s->{inv}'"), '57014',
				"$s->{tag}: journaled as cancelled");
			is(psql_ok("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dpwin chunk worker'"
				  . " AND pid IN (SELECT worker_pid FROM dpwin.chunk WHERE invocation_id = '$s->{inv}')"), 0,
				"$s->{tag}: its chunk workers have stopped");
			settle_and_check($s, 'failed');
		}

		# --- while the generation is built ------------------------------------------------

		{
			my $s = scenario("${how}_bld_$m");
			# hold the ATTACH of the staged parts: it names a partition id,
			# then a staging table
			my $gen = qr/^ALTER TABLE `\Q$db\E`\.`\Q$s->{prefix}\Egen` ATTACH .*_stg_/s;
			fault(pattern => "' FROM `$db`.`$s->{prefix}stg_", mode => 'hold', count => 1);
			my ($h, $pid) = start_caller($s);
			ok(wait_until(sub { state_of($s->{inv}) eq 'verified' }, 30), "$s->{tag}: building");
			ok(wait_running($gen, 1, phase => 'holding'), "$s->{tag}: the attach of the staged parts is on the server");
			interrupt_caller($s, $how, $h, $pid);
			wait_final($s);
			none_held($s);
			check_after_fault($s, which => 'old', state => 'failed', outcome => '');
			settle_and_check($s, 'failed');
		}

		# --- during publication ---------------------------------------------------------

		{
			my $s = scenario("${how}_pub_$m");
			fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => 1);
			my ($h, $pid) = start_caller($s);
			ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 30), "$s->{tag}: publishing");
			ok(wait_running(qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/, 1, phase => 'holding'),
				"$s->{tag}: the EXCHANGE is on the server");
			interrupt_caller($s, $how, $h, $pid);
			is(release("EXCHANGE TABLES `$db`.`$s->{t}` AND"), 1,
				"$s->{tag}: the EXCHANGE still waits after the interruption, and is released");
			wait_final($s);
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'"), 1,
				"$s->{tag}: with its evidence");
			settle_and_check($s, 'recover');
		}
	}
});

crash_teardown();
done_testing();
