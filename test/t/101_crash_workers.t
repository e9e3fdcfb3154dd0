# The crash matrix, part 2: SIGKILL of chunk workers mid-chunk (one of
# them, then all of them).  Any backend killed by a signal makes the
# postmaster restart the cluster, so the coordinator and its snapshot go
# too: the invocation's snapshot expired before publication, and a new
# invocation re-extracts the window -- after recover() (which drops the
# dead invocation's staging tables), or directly (which must expire the
# orphan and drop its tables as well).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql);
use DpwinCrash;
use Time::HiRes qw(usleep);

my $db = "t101_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);

# The live chunk workers of the invocation, once both are in a chunk.
sub worker_pids
{
	my ($s) = @_;
	my @pids;
	wait_until(sub {
			@pids = split /\n/, psql_ok("SELECT c.worker_pid FROM dpwin.chunk c"
				  . " JOIN pg_stat_activity a ON a.pid = c.worker_pid AND a.backend_type = 'dpwin chunk worker'"
				  . " WHERE c.invocation_id = '$s->{inv}' AND c.state = 'running' ORDER BY c.chunk_no");
			@pids == 2;
		}, 30);
	return @pids;
}

for my $case ([ 'one', 'recover: expired' ], [ 'all', 'a new invocation directly' ])
{
	my ($which, $then) = @$case;
	my $s = scenario("kill_$which");
	# Each staging INSERT is held a while, so that the workers are mid-chunk.
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'delay', ms => 3000, count => 4);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	my @pids = worker_pids($s);
	is(scalar(@pids), 2, "kill_$which: two chunk workers are loading chunks");
	usleep(300_000);
	crash($which eq 'one' ? [ $pids[0] ] : \@pids, $h, "kill_$which");
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	is(chunks_in_state($s, 'running'), 2,
		"kill_$which: the journal shows the two chunks that were running");
	ok(scalar(@{ leftovers() }) > 0, "kill_$which: their staging tables are still there");
	settle_and_check($s, $which eq 'one' ? 'expired' : 'expired_new');
}

crash_teardown();
done_testing();
