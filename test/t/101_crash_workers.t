# The crash matrix, part 2: chunk workers that do not finish their chunk.
#
# * pg_terminate_backend() of one chunk worker, and of all of them, while
#   they are inside a chunk (held at the source barrier, see
#   DpwinFixture::hold_source): the server does not restart (a worker that
#   exits on SIGTERM is no crash, unlike one killed by SIGKILL, which
#   restarts the whole cluster and is the coordinator's crash of
#   100_crash_coordinator.t and 102_crash_server.t), and the coordinator
#   fails the invocation: the caller gets the error, the journal says
#   failed, the target is untouched, no staging table is left, and a new
#   invocation completes the window (docs/recovery.md, "A chunk worker
#   stops").
# * an error inside a worker that a retry cannot help (ClickHouse refuses
#   a chunk's INSERT with a non-transient code): the invocation fails at
#   once with that error, the chunk is not retried (recovery.md row 2).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish hold_source release_source workers_held);
use DpwinCrash;

my $db = "t101_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);

sub server_started { return psql_ok('SELECT pg_postmaster_start_time()'); }

for my $which ('one', 'all')
{
	my $tag = "term_$which";
	my $s = scenario($tag);
	my $started = server_started();
	my $barrier = hold_source("$db.src", 'src_w');
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	my @pids = workers_held($s->{inv}, 2);
	is(scalar(@pids), 2, "$tag: both chunk workers are inside a chunk, at the source barrier");
	my @victims = $which eq 'one' ? ($pids[0]) : @pids;
	is(psql_ok("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest(ARRAY["
			  . join(',', @victims) . "]) pid"), scalar(@victims),
		"$tag: pg_terminate_backend() of " . ($which eq 'one' ? 'the worker of chunk 0' : 'both workers'));
	ok(wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity WHERE pid IN (" . join(',', @victims) . ")") == 0 }, 30),
		"$tag: terminated");
	release_source($barrier);
	my ($rc, $out, $err) = bg_finish($h);
	isnt($rc, 0, "$tag: the refresh fails");
	like($err, qr/ERROR:\s+55000: chunk 0 of invocation \Q$s->{inv}\E was not staged/,
		"$tag: the caller is told which chunk was not staged") or diag($err);
	like($err, qr/DETAIL:\s+A chunk worker stopped before finishing it\./, "$tag: ... and why");
	is(server_started(), $started, "$tag: PostgreSQL did not restart");
	is(psql_ok("SELECT error_sqlstate || ' ' || error FROM dpwin.invocations WHERE invocation_id = '$s->{inv}'"),
		"55000 chunk 0 of invocation $s->{inv} was not staged", "$tag: the journal keeps the error");
	check_after_fault($s, which => 'old', state => 'failed', outcome => '');
	is(psql_ok("SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('dpwin coordinator', 'dpwin chunk worker')"),
		0, "$tag: no dpwin process is left");
	settle_and_check($s, 'failed');
}

# ---- an error a retry cannot help --------------------------------------------

{
	my $tag = 'worker_error';
	my $s = scenario($tag);
	my $seq = ch_log_seq();
	my $stg0 = "$s->{prefix}stg_0_";
	fault(pattern => "INSERT INTO `$db`.`${stg0}0` (", mode => 'error', code => 53, count => 1);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	like($err, qr/^HV000: ClickHouse error 53 while inserting rows of chunk 0/,
		"$tag: the refresh fails with the worker's error") or diag($err);
	is(scalar(grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$stg0\E\d+` \(/ } ch_log_since($seq)), 1,
		"$tag: chunk 0 was not retried (one INSERT)");
	is(psql_ok("SELECT attempt || ' ' || state || ' ' || (error LIKE 'ClickHouse error 53 %')::text FROM dpwin.chunk"
		  . " WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), '0 failed true',
		"$tag: the chunk journal shows attempt 0 failed with the error");
	is(psql_ok("SELECT error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$s->{inv}'"), 'HV000',
		"$tag: the journal keeps the SQLSTATE");
	check_after_fault($s, which => 'old', state => 'failed', outcome => '');
	settle_and_check($s, 'failed');
}

crash_teardown();
done_testing();
