# dpwin_refresh() on a pg_cron schedule: the job runs as the user who
# scheduled it, in the cron database, and publishes the window; the test
# sees the run succeed in cron.job_run_details and compares the target's
# full multiset of rows with the expected one.  Where pg_cron is not
# installed (no package for PostgreSQL 19), the same refresh runs called
# directly and only the parts that need pg_cron are left out (a diag line
# says so; they are not planned, not skipped).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture create_event_table ch_rows pg_rows);

my $db = "t063_$$";
my $schema = "t063_$$";
my $srv = 'sandbox_ch';
my $route = unique_name('t063r');
my $job = unique_name('t063job');
my $t = 'events';
my $E = '2026-09-09 00:00:00+00';

my $have_cron = psql_ok("SELECT count(*) FROM pg_extension WHERE extname = 'pg_cron'") == 1;
if ($have_cron)
{
	is(psql_ok("SELECT current_database() = current_setting('cron.database_name')"), 't',
		'the tests run in the database pg_cron serves');
}
else
{
	diag('pg_cron is not installed here: the scheduled runs are not tested, the refresh is called directly');
}

fresh_fixture($db, $schema);
create_event_table($t, "(1, '2026-09-01 00:00:00', 'before'), (1, '2026-09-01 00:00:00', 'before'),"
	  . " (2, '2026-09-08 10:00:00', 'old in window'), (3, '2026-09-20 00:00:00', 'after'), (4, NULL, 'null')");
psql_ok("CREATE TABLE $schema.src (id bigint NOT NULL, w timestamptz, v text);
	INSERT INTO $schema.src
		SELECT g, timestamptz '2026-09-08 00:00:00+00' + g * interval '11 minutes', 'cron ' || (g % 3)
		FROM generate_series(0, 130) g;
	INSERT INTO $schema.src VALUES (900, '2026-09-08 09:00:00+00', 'dup'), (900, '2026-09-08 09:00:00+00', 'dup');
	SELECT dpwin.create_route('$route', '$schema.src'::regclass, 'w', '$srv', '$db', '$t',
		interval '1 day', interval '8 hours', parallelism => 2);");

my $pre = ch_rows($t);
my @kept = grep { /^(1|3|4)\|/ } @$pre;
my $expected = [ sort(@kept, @{ pg_rows("w >= timestamptz '$E' - interval '1 day' AND w < '$E'") }) ];

unless ($have_cron)
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E')"), 'completed', 'the refresh, called directly, completes');
	is_deeply(ch_rows($t), $expected, 'the target holds the kept rows and the source window, duplicates kept');
	is(psql_ok("SELECT last_interval_end = '$E' FROM dpwin.route_state JOIN dpwin.route USING (route_id)"
		  . " WHERE route_name = '$route'"), 't', 'route_state advanced');
	psql_ok("SELECT dpwin.drop_route('$route')");
	drop_fixture();
	done_testing();
	exit 0;
}

# Second schedules need pg_cron 1.5; older versions run every minute.
my $command = "\$\$SELECT invocation_id, state FROM dpwin_refresh('$route', '$E')\$\$";
my ($rc, $jobid, $err) = psql("SELECT cron.schedule('$job', '2 seconds', $command)");
if ($rc)
{
	like($err, qr/invalid schedule/, 'this pg_cron has no second schedules: every minute instead');
	$jobid = psql_ok("SELECT cron.schedule('$job', '* * * * *', $command)");
}
like($jobid, qr/^\d+$/, 'the refresh is scheduled');

ok(wait_until(sub { psql_ok("SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid AND status = 'succeeded'") > 0 }, 90),
	'a scheduled run succeeded');
psql_ok("SELECT cron.unschedule($jobid)");
ok(wait_until(sub { psql_ok("SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid"
			. " AND status IN ('starting', 'running')") == 0 }, 60),
	'no run is left running after unschedule');

# A run still pending when the job is unscheduled is marked "job canceled"
# by pg_cron; every other run must have succeeded.
my $details = psql_ok("SELECT string_agg(DISTINCT status || ': ' || coalesce(return_message, ''), '; ')"
	  . " FROM cron.job_run_details WHERE jobid = $jobid AND status <> 'succeeded'"
	  . " AND return_message IS DISTINCT FROM 'job canceled'");
is($details, '', 'every scheduled run succeeded') or diag($details);
like(psql_ok("SELECT return_message FROM cron.job_run_details WHERE jobid = $jobid AND status = 'succeeded'"
	  . " ORDER BY runid LIMIT 1"), qr/^(?:1 row|SELECT 1)$/, 'a run returned the refresh result row');

is_deeply(ch_rows($t), $expected, 'the target holds the kept rows and the source window, duplicates kept');
my $runs = psql_ok("SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid AND status = 'succeeded'");
my $invocations = psql_ok("SELECT count(*) FROM dpwin.invocations WHERE route_name = '$route'");
ok($invocations >= $runs, "an invocation for each succeeded run ($invocations for $runs)");
# A run that pg_cron cancels on unschedule may already have begun its
# refresh: that invocation ends without publishing, like any cancelled
# caller's (104_cancel.t).  Every invocation ends, and only cancelled runs
# leave one that did not complete.
ok(wait_until(sub { psql_ok("SELECT count(*) FROM dpwin.invocations WHERE route_name = '$route'"
			  . " AND finished_at IS NULL") == 0 }, 60), 'every invocation the schedule started ended');
my $canceled = psql_ok("SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid AND return_message = 'job canceled'");
my $completed = psql_ok("SELECT count(*) FROM dpwin.invocations WHERE route_name = '$route' AND state = 'completed'");
ok($completed >= $runs, "an invocation completed for each succeeded run ($completed for $runs)");
ok($invocations - $completed <= $canceled,
	"only runs pg_cron cancelled left an invocation that did not complete ("
	  . ($invocations - $completed) . " of $invocations, $canceled cancelled)")
  or diag(psql_ok("SELECT string_agg(state || ' ' || coalesce(error_sqlstate, '') || ' ' || coalesce(error, ''), '; ')"
		  . " FROM dpwin.invocations WHERE route_name = '$route' AND state <> 'completed'"));
is(psql_ok("SELECT DISTINCT caller::text FROM dpwin.invocations WHERE route_name = '$route'"),
	psql_ok('SELECT current_user'), 'the job ran as the user who scheduled it');
is(psql_ok("SELECT last_interval_end = '$E' FROM dpwin.route_state JOIN dpwin.route USING (route_id)"
	  . " WHERE route_name = '$route'"), 't', 'route_state advanced');
my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$route'");
is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db' AND startsWith(name, '_dpwin_backup_${rid}_')"),
	"$completed\n", 'one backup per completed invocation');

psql_ok("DELETE FROM cron.job_run_details WHERE jobid = $jobid;
	SELECT dpwin.drop_route('$route');");
drop_fixture();

done_testing();
