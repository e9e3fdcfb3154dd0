# dpwin.max_workers and dpwin.retry_backoff set in the caller's session
# (both are superuser settings, docs/guide.md "Settings"): the refresh
# runs with them, as it runs with the session's dpwin.lease_timeout.
# 055_worker_limits.t checks the same limits set for the whole server.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault fresh_fixture drop_fixture create_event_source new_event_route new_uuid route_id
  invocation_prefix refresh_row_sql bg_psql bg_finish hold_source release_source workers_held cluster_processes
  pg_log_mark pg_log_since);
use DpwinCrash qw(coordinator_pid);

my $db = "t056_$$";
my $E = '2026-09-09 00:00:00+00';

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
create_event_source();

# SET dpwin.max_workers = 2 caps a route of parallelism 4.
{
	my ($route, $t) = new_event_route('cap');
	psql_ok("SELECT dpwin.alter_route('$route', parallelism => 4)");
	my $inv = new_uuid();
	my $barrier = hold_source("$db.src", 'src_w');
	my $h = bg_psql("SET dpwin.max_workers = 2; " . refresh_row_sql($route, $E, $inv));
	my @held = workers_held($inv, 2);
	my $coord = coordinator_pid($inv);
	ok(wait_until(sub { psql_ok("SELECT wait_event FROM pg_stat_activity WHERE pid = $coord") eq 'Extension' }, 30),
		'max_workers: the coordinator has started its workers and waits for them');
	is(scalar(keys %{ cluster_processes(qr/dpwin chunk worker .*\Q$inv\E/) }), 2,
		"max_workers: the session's dpwin.max_workers = 2 caps the chunk workers at 2");
	release_source($barrier);
	like((bg_finish($h))[1], qr/\|completed\|/, 'max_workers: the refresh completes');
}

# SET dpwin.retry_backoff = '1200ms' delays a chunk's first retry by 1200 ms
# (the server's default is 500 ms): the worker's log line names the
# backoff it waits, and the retry comes no sooner.
{
	my ($route, $t) = new_event_route('backoff');
	my $inv = new_uuid();
	my $stg = invocation_prefix(route_id($route), $inv) . 'stg_1_';
	fault(pattern => "INSERT INTO `$db`.`${stg}0` (", mode => 'error', code => 1000, count => 1);
	my $seq = ch_log_seq();
	my $mark = pg_log_mark();
	like(psql_ok("SET dpwin.retry_backoff = '1200ms';\n" . refresh_row_sql($route, $E, $inv)), qr/\|completed\|/,
		'backoff: the refresh completes');
	my ($logged) = pg_log_since($mark) =~ /dpwin: attempt 0 of chunk 1 failed, retrying in (\d+) ms/;
	is($logged, 1200, "backoff: the worker waits the session's 1200 ms before its first retry");
	my @log = ch_log_since($seq);
	my ($fail) = grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q${stg}0\E` / } @log;
	my ($next) = grep { $_->{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q${stg}1\E` / } @log;
	my $gap = $fail && $next ? $next->{ms} - $fail->{ms} : -1;
	cmp_ok($gap, '>=', 1200, 'backoff: and the retry comes that long after the failure, or later');
}

drop_fixture();
done_testing();
