# dpwin.health (docs/guide.md, "Monitoring") gives each status from the
# catalog alone, without a statement to ClickHouse: stale (never published,
# or older than stale_after), ok, drifted (a verification found drift, no
# publication of its window since), failing (consecutive failures, the
# last SQLSTATE), unresolved (a publication outcome waiting for recover());
# and the uncovered spans between published windows.  The recipes of
# "Operating a route" run here as the guide prints them (read from
# docs/guide.md, the route's name put in): onboarding, watching, catching up,
# retention, the pg_cron alert; and the postgres_exporter query file's
# queries give the columns its metrics name.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes ch_rows pg_rows multiset_is);

my $db = "t132_$$";
fresh_fixture($db, $db);
psql_ok("CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz NOT NULL, v text);
	INSERT INTO $db.src
		SELECT g, timestamptz '2026-07-30 00:00:00+00' + g * interval '53 minutes 0.5 seconds', 'src ' || (g % 17)
		FROM generate_series(0, 1250) g;");
my @routes;

sub route
{
	my ($t, $lookback, $chunk) = @_;
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w DateTime64(6, 'UTC'), v Nullable(String))"
		  . " ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id");
	ch_ok("INSERT INTO `$db`.`$t` VALUES (1, '2026-01-01 00:00:00', 'kept')");
	my $r = unique_name("t132_$t");
	push @routes, $r;
	psql_ok("SELECT dpwin.create_route('$r', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', '$t',"
		  . " interval '$lookback', interval '$chunk', parallelism => 2)");
	return $r;
}

# The SQL of the guide's recipe $name (the block after "-- recipe: $name"),
# on route $r instead of 'events'.
my $guide = do { local (@ARGV, $/) = (repo_root() . '/docs/guide.md'); <> };

sub recipe
{
	my ($name, $r) = @_;
	my ($sql) = $guide =~ /```sql\n-- recipe: \Q$name\E\n(.*?)```/s or die "no recipe $name in docs/guide.md";
	$sql =~ s/'events'/'$r'/g;
	return $sql;
}

sub health
{
	my ($r, $cols) = @_;
	return psql_ok("SELECT $cols FROM dpwin.health WHERE route_name = '$r'");
}

my $kept = '1|' . psql_ok("SELECT (extract(epoch FROM timestamptz '2026-01-01 00:00:00+00') * 1000000)::bigint") . '|kept';

# --- onboarding and watching, as the guide prints them ---------------------------

my $rb = route('onboard', '31 days', '1 day');
my $out = psql_ok(recipe('onboard', $rb));
multiset_is(ch_rows('onboard'), [ $kept, @{ pg_rows("w >= '2026-08-01 00:00:00+00' AND w < '2026-09-01 00:00:00+00'") } ],
	'onboard: the history is published');
like(psql_ok(recipe('watch-backfill', $rb)), qr/\|\Q$rb\E\|completed\|1\|1\|\|\d+\|\{\}\|_dpwin_backup_/,
	'watch-backfill: the backfill is completed, one window of one, nothing missing, its backup named');

# --- stale, uncovered, caught up, ok -------------------------------------------

my $r = route('tgt', '1 day', '12 hours');
is(health($r, 'status || \'|\' || coalesce(last_interval_end::text, \'none\')'), 'stale|none',
	'a route never published is stale');
for my $end ('2026-09-02', '2026-09-03', '2026-09-06')
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$r', '$end 00:00:00+00')"), 'completed', "window ending $end published");
}
my $seq = ch_log_seq();
is(health($r, 'uncovered'), '{["2026-09-03 00:00:00+00","2026-09-05 00:00:00+00")}',
	'the uncovered span between the published windows');
is(health($r, 'status'), 'stale', 'data of 2026-09-06 are stale after one lookback');
is(scalar(ch_log_since($seq)), 0, 'dpwin.health sent no statement to ClickHouse');

psql_ok(recipe('catch-up', $r));
is(health($r, 'uncovered'), '{}', 'catch-up: the uncovered span is published');
multiset_is(ch_rows('tgt'), [ $kept, @{ pg_rows("w >= '2026-09-01 00:00:00+00' AND w < '2026-09-06 00:00:00+00'") } ],
	'catch-up: the target is the source over every window since the first');

psql_ok("SELECT dpwin.alter_route('$r', stale_after => interval '10000 days')");
is(health($r, 'status || \'|\' || stale_after || \'|\' || consecutive_failures'), 'ok|10000 days|0',
	'with stale_after beyond the data\'s age the route is ok');

# --- drifted -----------------------------------------------------------------

ch_ok("INSERT INTO `$db`.`tgt` VALUES (99, '2026-09-05 10:00:00', 'drift')");
psql_ok("SELECT count(*) FROM dpwin.verify('$r', '2026-09-06 00:00:00+00')");
is(health($r, 'status || \'|\' || drifted_chunks'), 'drifted|1', 'a verification that found a drifting chunk: drifted');
is(psql_ok("SELECT state FROM dpwin_refresh('$r', '2026-09-06 00:00:00+00')"), 'completed', 'the window is refreshed');
is(health($r, 'status'), 'ok', 'a publication of the verified window since: ok again');

# --- failing -----------------------------------------------------------------

ch_ok("RENAME TABLE `$db`.`tgt` TO `$db`.`tgt_away`");
for my $n (1, 2)
{
	like(psql_err("SELECT * FROM dpwin_refresh('$r', '2026-09-07 00:00:00+00')"), qr/^\w{5}:/, "refresh $n fails (no target)");
}
my $last = psql_ok("SELECT error_sqlstate FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
	  . " WHERE r.route_name = '$r' ORDER BY i.created_at DESC LIMIT 1");
is(health($r, "status || '|' || consecutive_failures || '|' || last_error_sqlstate || '|' || last_state"),
	"failing|2|$last|failed", 'two failed refreshes: failing, two consecutive failures, the last SQLSTATE');
ch_ok("RENAME TABLE `$db`.`tgt_away` TO `$db`.`tgt`");
is(psql_ok("SELECT state FROM dpwin_refresh('$r', '2026-09-07 00:00:00+00')"), 'completed', 'the target is back');
is(health($r, 'status || \'|\' || consecutive_failures'), 'ok|0', 'a completed refresh ends the failures');

# --- unresolved ----------------------------------------------------------------

# The newest publication as a lost EXCHANGE reply leaves it: outcome unknown.
my $inv = psql_ok("SELECT i.invocation_id FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
	  . " WHERE r.route_name = '$r' AND i.state = 'completed' ORDER BY i.created_at DESC LIMIT 1");
psql_ok("UPDATE dpwin.invocation SET state = 'unknown', finished_at = NULL WHERE invocation_id = '$inv';
	UPDATE dpwin.publication SET outcome = 'unknown' WHERE invocation_id = '$inv';");
is(health($r, 'status || \'|\' || unresolved_invocations'), 'unresolved|1', 'an unknown outcome: unresolved');
like(psql_err("SELECT * FROM dpwin_refresh('$r', '2026-09-08 00:00:00+00')"), qr/^55006:/,
	'(which blocks the next refresh)');
is(health($r, 'status'), 'unresolved', 'unresolved comes before everything else');
is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', 'recover() settles it by the UUIDs');
is(health($r, 'status || \'|\' || unresolved_invocations'), 'ok|0', 'ok again');

# --- stale before ok, and the alert --------------------------------------------

psql_ok("SELECT dpwin.alter_route('$r', stale_after => interval '1 day')");
is(health($r, 'status'), 'stale', 'stale_after one day: stale');
my ($job) = recipe('alert', $r) =~ /\$job\$\n(.*)\$job\$/s or die 'no job in the alert recipe';
like(psql_err($job), qr/^P0001: dpwin routes need attention: .*\Q$r\E: stale/,
	'alert: the job fails, naming the stale route');
psql_ok("SELECT dpwin.alter_route('$_', stale_after => interval '10000 days')") for ($r, $rb);
is(psql_ok("SELECT count(*) FROM dpwin.health WHERE status <> 'ok' AND route_name IN ('$r', '$rb')"), 0,
	'both routes of this test are ok');
if (psql_ok("SELECT count(*) FROM dpwin.health WHERE status <> 'ok'") == 0)
{
	psql_ok($job);
	pass('alert: the job succeeds when every route is ok');
}
else
{
	# routes another test left behind: the job fails, but not for these
	unlike(psql_err($job) // '', qr/\Q$r\E|\Q$rb\E/, 'alert: the job names neither route once they are ok');
}
if (psql_ok("SELECT count(*) FROM pg_extension WHERE extname = 'pg_cron'") == 1)
{
	psql_ok(recipe('alert', $r));
	is(psql_ok("SELECT count(*) FROM cron.job WHERE jobname = 'dpwin-health'"), 1, 'alert: the job is scheduled');
	psql_ok("SELECT cron.unschedule('dpwin-health')");
}
else
{
	diag('pg_cron is not installed here: the alert job ran as a statement, not scheduled');
}

# --- retention recipe ------------------------------------------------------------

like(psql_ok(recipe('retention', $r)), qr/^\n?\Q$r\E\|2\n\Q$r\E\|\d+$/, 'retention: the recipe runs');
is(health($r, 'keep_backups'), 2, 'keep_backups is 2');

# --- the postgres_exporter query file ----------------------------------------------

my $yaml = do { local (@ARGV, $/) = (repo_root() . '/docs/postgres_exporter.yaml'); <> };
my $families = 0;
while ($yaml =~ /^(\w+):\n  query: \|\n((?:    .*\n)+)  metrics:\n((?:    .*\n)+)/mg)
{
	my ($ns, $query, $metrics) = ($1, $2, $3);
	$families++;
	my @names = $metrics =~ /^    - (\w+):/mg;
	my $csv = psql_ok("COPY ($query) TO STDOUT WITH (FORMAT csv, HEADER)");
	my ($header, @rows) = split /\n/, $csv;
	is_deeply([ split /,/, $header ], \@names, "postgres_exporter $ns: the query's columns are the metrics'");
	ok(scalar(grep { /^\Q$r\E,/ } @rows), "postgres_exporter $ns: a row for the route");
	is(join(' ', sort grep { /^\Q$r\E,/ } @rows), "$r,drifted,0 $r,failing,0 $r,ok,1 $r,stale,0 $r,unresolved,0",
		'postgres_exporter: status_is is 1 for the route\'s status (ok), 0 for the others')
	  if $ns eq 'dpwin_health';
}
is($families, 2, 'postgres_exporter.yaml has two metric families');

drop_routes(@routes);
drop_fixture();
done_testing();
