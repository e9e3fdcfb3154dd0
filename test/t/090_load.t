# Concurrent load, with nothing lost.
#
# 1. Eight routes on eight ClickHouse targets, each pre-filled with rows
#    outside and inside the window, NULL-window rows and duplicates, each
#    route with parallelism 2, refreshed at the same moment from eight
#    psql sessions.  Every refresh completes (or, if worker slots ran out,
#    fails with the clear 53400 error); every completed target then holds
#    exactly its kept old rows plus the source's window, row for row; no
#    staging or generation table is left; no dpwin process or progress
#    slot outlives the refreshes.
# 2. A pg_cron job refreshing a target fires while a slow refresh of that
#    target runs: that cron run fails with the lease error, the slow
#    refresh and the next cron run complete, the target is exact, and
#    nothing keeps running after cron.unschedule().  pg_cron 1.4 (the
#    version on these machines) schedules by the minute only, so the slow
#    refresh is timed to straddle a minute boundary, and parts 1 and 3 run
#    while the test waits for the boundaries.
# 3. Two refreshes of one target launched at the same moment: one
#    completes, the other fails with 55P03 naming the winner's process and
#    invocation; with dpwin.lease_timeout both complete, one after the
#    other.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture pg_row_sql ch_row_sql sorted_lines multiset_is multiset_rows_compared
  fault);
use IPC::Run qw(start pump finish timeout);
use Time::HiRes qw(time usleep);

my $t0 = time();
my $tag = "t090_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';
my $nroutes = 8;
my $gate_key = 90090;

my $lo = '2026-05-01 00:00:00+00';
my $hi = '2026-05-02 00:00:00+00';
my $ch_lo = "toDateTime64('2026-05-01 00:00:00', 6, 'UTC')";
my $ch_hi = "toDateTime64('2026-05-02 00:00:00', 6, 'UTC')";
my $pg_in = "w >= '$lo' AND w < '$hi'";
my $ch_keep = "isNull(w) OR w < $ch_lo OR w >= $ch_hi";

my $pg_row = pg_row_sql();
my $ch_row = ch_row_sql();

sub pg_window_rows { my ($t) = @_; return sorted_lines(psql_ok("SELECT $pg_row FROM $t WHERE $pg_in")); }

sub ch_rows
{
	my ($t, $where) = @_;
	return sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$t`" . ($where ? " WHERE $where" : '')));
}

# A psql session running $sql in the background, then quitting.  Output
# is unaligned, tuples only, errors verbose (with their SQLSTATE).
# IPC::Run feeds the input only while the session is pumped.
sub launch
{
	my ($sql) = @_;
	my $s = { in => "\\set VERBOSITY verbose\n$sql\n\\q\n", out => '', err => '' };
	$s->{h} = start [ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1' ],
	  '<', \$s->{in}, '>', \$s->{out}, '2>', \$s->{err}, timeout(150);
	return $s;
}

sub pump_all { $_->{h}->pump_nb for grep { $_->{h}->pumpable } @_; }

# The result of a launched refresh: (state, invocation) or (undef, undef,
# sqlstate, error text).
sub outcome
{
	my ($s) = @_;
	eval { finish($s->{h}) };
	diag("psql session: $@") if $@;
	return ($1, $2) if $s->{out} =~ /^R\|(\w+)\|([0-9a-f-]{36})$/m;
	my ($state) = $s->{err} =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return (undef, undef, $state // '?', $s->{err});
}

# A gate: one session holds an advisory lock; refresh sessions take it
# shared, release it, and refresh, so that they all start together.
my $gate = { in => '', out => '', err => '' };
$gate->{h} = start [ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1' ],
  '<', \$gate->{in}, '>', \$gate->{out}, '2>', \$gate->{err}, timeout(300);

sub gate_cmd
{
	my ($sql, $marker) = @_;
	$gate->{in} .= "$sql\nSELECT '$marker';\n";
	pump($gate->{h}) until $gate->{out} =~ /^\Q$marker\E$/m;
	$gate->{out} = '';
}

sub gate_close { gate_cmd("SELECT pg_advisory_lock($gate_key, 1);", 'closed'); }
sub gate_open { gate_cmd("SELECT pg_advisory_unlock($gate_key, 1);", 'opened'); }

sub wait_gate
{
	my ($n, @sessions) = @_;
	return wait_until(sub {
		pump_all(@sessions);
		psql_ok("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $gate_key"
			  . " AND objid = 1 AND objsubid = 2 AND NOT granted") == $n
	}, 30);
}

# Launch refreshes of @routes that all start at the same moment.
sub launch_gated
{
	my ($pre, @routes) = @_;
	gate_close();
	my @s = map {
		launch("SELECT pg_advisory_lock_shared($gate_key, 1);\n"
			  . "SELECT pg_advisory_unlock_shared($gate_key, 1);\n" . $pre
			  . "SELECT 'R', state, invocation_id FROM dpwin_refresh('$_', '$hi');")
	} @routes;
	my $waiting = wait_gate(scalar(@routes), @s);
	gate_open();
	return ($waiting, @s);
}

sub dpwin_procs
{
	return psql_ok("SELECT count(*) FROM pg_stat_activity"
		  . " WHERE backend_type IN ('dpwin coordinator', 'dpwin chunk worker')");
}

sub leftovers
{
	return ch_ok("SELECT count() FROM system.tables WHERE database = '$db'"
		  . " AND (startsWith(name, '_dpwin_probe_') OR startsWith(name, '_dpwin_')"
		  . "  AND (position(name, '_stg_') > 0 OR endsWith(name, '_gen')))") + 0;
}

# A source table and a pre-filled target for route $k, ids apart from
# every other route's.  Returns the route id.
sub setup_route
{
	my ($k, $route) = @_;
	my $base = ($k + 1) * 1_000_000;
	my $n = 1200 + 100 * $k;
	my $src = "$schema.src$k";
	my $tgt = "`$db`.`tgt$k`";

	ch_ok("CREATE TABLE $tgt (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String),"
		  . " n Nullable(Decimal(12, 2))) ENGINE = MergeTree ORDER BY id");

	# Old rows: before the window, from its end on, NULL-window rows,
	# stale rows inside it, both bounds +- 1 us; then duplicates of some
	# of each kind.
	ch_ok("INSERT INTO $tgt SELECT $base + 500000 + number,"
		  . " addMicroseconds(toDateTime64('2026-04-29 00:00:00', 6, 'UTC'), number * 432000123),"
		  . " concat('old-before-', toString(number)), toDecimal64(number / 4, 2) FROM numbers(200)");
	ch_ok("INSERT INTO $tgt SELECT $base + 600000 + number,"
		  . " addMicroseconds($ch_hi, number * 600000007), concat('old-after-', toString(number)),"
		  . " if(number % 3 = 0, NULL, toDecimal64(-1 * number, 2)) FROM numbers(100)");
	ch_ok("INSERT INTO $tgt SELECT $base + 700000 + number, NULL,"
		  . " if(number % 4 = 0, NULL, concat('old-null-', toString(number))), toDecimal64(number, 2) FROM numbers(20)");
	ch_ok("INSERT INTO $tgt SELECT $base + 800000 + number, addMicroseconds($ch_lo, number * 2880000001),"
		  . " 'old-stale-in-window', 1 FROM numbers(30)");
	ch_ok("INSERT INTO $tgt VALUES ($base + 900001, addMicroseconds($ch_lo, -1), 'old-lo-1us', 1),"
		  . " ($base + 900002, $ch_lo, 'old-lo', 2), ($base + 900003, addMicroseconds($ch_hi, -1), 'old-hi-1us', 3),"
		  . " ($base + 900004, $ch_hi, 'old-hi', 4)");
	ch_ok("INSERT INTO $tgt SELECT * FROM $tgt WHERE id % 20 = 0 OR (isNull(w) AND id % 4 = 1)");

	# Source: the window's rows (some twice, both bounds), and rows outside
	# it that must not be copied.
	psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz, v text, n numeric(12,2));
		INSERT INTO $src
		SELECT $base + g, timestamptz '$lo' + (g * 86399.999 / $n) * interval '1 second',
			CASE WHEN g % 17 = 0 THEN NULL ELSE 'r$k-' || g || repeat(E'\\u00e9\\n', g % 3) END,
			CASE WHEN g % 13 = 0 THEN NULL ELSE (g * 1.25 - 300)::numeric(12,2) END
		  FROM generate_series(0, $n - 1) g;
		INSERT INTO $src SELECT * FROM $src WHERE id % 25 = 0;
		INSERT INTO $src VALUES ($base + 90001, '$lo', 'lo', 1),
			($base + 90002, timestamptz '$hi' - interval '1 microsecond', 'hi-1us', 2),
			($base + 90003, timestamptz '$lo' - interval '1 microsecond', 'out-lo-1us', 3),
			($base + 90004, '$hi', 'out-hi', 4);
		INSERT INTO $src SELECT $base + 91000 + g, timestamptz '$lo' - g * interval '1 hour', 'out-before', g
		  FROM generate_series(1, 50) g;
		INSERT INTO $src SELECT $base + 92000 + g, timestamptz '$hi' + g * interval '1 hour', 'out-after', g
		  FROM generate_series(1, 50) g;
		INSERT INTO $src SELECT $base + 93000 + g, NULL, 'src-null', g FROM generate_series(1, 10) g;");
	return psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', 'tgt$k',
		interval '1 day', interval '2 hours', parallelism => 2, batch_rows => 100)");
}

# What route $k's target must hold after a refresh: its kept old rows
# plus the source's window.
sub expected_rows
{
	my ($k) = @_;
	return [ sort(@{ ch_rows("tgt$k", $ch_keep) }, @{ pg_window_rows("$schema.src$k") }) ];
}

# Whatever happens, leave no cron job behind.
END
{
	psql("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = '${tag}_cron'");
}

ch_control('POST', '/faults/clear');
fresh_fixture($db, $schema);

my $ts = time();
my (%expected, %before, %rid);
for my $k (0 .. $nroutes + 1)
{
	my $route = $k < $nroutes ? "${tag}_r$k" : $k == $nroutes ? "${tag}_cron" : "${tag}_pair";
	$rid{$k} = setup_route($k, $route);
	$expected{$k} = expected_rows($k);
	$before{$k} = ch_rows("tgt$k");
	cmp_ok(scalar(@{ ch_rows("tgt$k", "NOT ($ch_keep)") }), '>=', 30,
		"$route: the target holds stale rows inside the window before any refresh");
}
note(sprintf("set-up of %d routes: %.2f s", $nroutes + 2, time() - $ts));

# ---------------------------------------------------------------------
# 1. Eight routes, eight targets, refreshed at the same moment.
# ---------------------------------------------------------------------
sub part1
{
	my $t1 = time();
	my ($waiting, @sessions) = launch_gated('', map { "${tag}_r$_" } 0 .. $nroutes - 1);
	ok($waiting, "$nroutes refresh sessions waited at the gate");

	# Watch them while they run.
	my ($peak_coord, $peak_workers, $peak_progress) = (0, 0, 0);
	while (grep { $_->{h}->pumpable } @sessions)
	{
		my ($c, $w, $p) = split /\|/, psql_ok(
			"SELECT count(*) FILTER (WHERE backend_type = 'dpwin coordinator'),"
			  . " count(*) FILTER (WHERE backend_type = 'dpwin chunk worker'),"
			  . " (SELECT count(*) FROM dpwin.progress)"
			  . " FROM pg_stat_activity");
		$peak_coord = $c if $c > $peak_coord;
		$peak_workers = $w if $w > $peak_workers;
		$peak_progress = $p if $p > $peak_progress;
		pump_all(@sessions);
		usleep(50_000);
		last if time() - $t1 > 100;
	}
	my (%inv, $completed, $refused);
	for my $k (0 .. $nroutes - 1)
	{
		my ($state, $id, $sqlstate, $err) = outcome($sessions[$k]);
		if (defined $state)
		{
			is($state, 'completed', "route $k: the refresh completed");
			$inv{$k} = $id;
			$completed++;
		}
		else
		{
			# Eight targets never contend for a lease: the only acceptable
			# failure is running out of worker slots, said clearly.
			is($sqlstate, '53400', "route $k: refused only for want of worker slots") or diag($err);
			like($err, qr/could not start .*worker.*\n(?:.*\n)*HINT:.*max_worker_processes/,
				"route $k: the error names the worker and hints at max_worker_processes");
			note("route $k: $1") if $err =~ /^(ERROR:.*)$/m;
			$refused++;
		}
	}
	my $wall = time() - $t1;

	# dpwin's processes are gone the moment the callers have their answers.
	is(dpwin_procs(), 0, 'no dpwin coordinator or chunk worker is left after the refreshes');
	is(psql_ok('SELECT count(*) FROM dpwin.progress'), 0, 'dpwin.progress is empty');
	is(leftovers(), 0, 'no staging, generation or probe table is left in ClickHouse');

	my $rows = 0;
	for my $k (0 .. $nroutes - 1)
	{
		if ($inv{$k})
		{
			my $got = ch_rows("tgt$k");
			multiset_is($got, $expected{$k},
				"route $k: the target is its kept old rows plus the source window, row for row ("
				  . scalar(@$got) . ' rows)');
			$rows += @$got;
			is(psql_ok("SELECT i.state || '|' || i.chunks_verified || '|' || (v.result->'evidence'->>'source_rows')"
					  . " FROM dpwin.invocations i JOIN dpwin.invocation v USING (invocation_id)"
					  . " WHERE invocation_id = '$inv{$k}'"),
				'completed|12|' . scalar(@{ pg_window_rows("$schema.src$k") }),
				"route $k: 12 chunks verified, evidence counts the source window");
		}
		else
		{
			multiset_is(ch_rows("tgt$k"), $before{$k}, "route $k: the refused refresh left the target untouched");
		}
	}

	# How many ran at once, by the registry's own clocks.
	my $overlap = psql_ok("SELECT max(n) FROM (SELECT sum(d) OVER (ORDER BY t, d) AS n FROM ("
		  . " SELECT i.created_at AS t, 1 AS d FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
		  . "  WHERE r.route_name LIKE '${tag}_r%'"
		  . " UNION ALL SELECT i.finished_at, -1 FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
		  . "  WHERE r.route_name LIKE '${tag}_r%') e) s");
	cmp_ok($overlap, '>=', ($completed // 0) / 2, "the refreshes overlapped: $overlap held their leases at once");
	note(sprintf("part 1: %d refreshes launched at once, %d completed, %d refused for worker slots;"
			  . " %d ran at once by the registry (peak seen: %d coordinators, %d chunk workers,"
			  . " %d progress slots); %d target rows compared; wall time %.2f s",
			$nroutes, $completed // 0, $refused // 0, $overlap, $peak_coord, $peak_workers,
			$peak_progress, $rows, $wall));
}

# ---------------------------------------------------------------------
# 3. Two refreshes of one target at the same moment.
# ---------------------------------------------------------------------
sub part3
{
	my $k = $nroutes + 1;
	my $route = "${tag}_pair";
	my $t3 = time();
	my $rounds = 4;
	my $named = 0;

	for my $round (1 .. $rounds)
	{
		my ($waiting, @pair) = launch_gated('', $route, $route);
		ok($waiting, "pair round $round: both sessions waited at the gate");
		my @res = map { [ outcome($_) ] } @pair;
		my @won = grep { defined $_->[0] } @res;
		my @lost = grep { !defined $_->[0] } @res;
		is(scalar(@won) . '|' . ($won[0] ? $won[0][0] : ''), '1|completed',
			"pair round $round: exactly one refresh completed")
		  or diag(join("\n", map { $_->[3] // $_->[0] } @res));
		next unless @won == 1 && @lost == 1;
		is($lost[0][2], '55P03', "pair round $round: the other failed with 55P03");
		$named++ if like($lost[0][3],
			qr/held by process \d+ \(dpwin coordinator\) running invocation \Q$won[0][1]\E/,
			"pair round $round: its error names the winner's process and invocation");
	}
	multiset_is(ch_rows("tgt$k"), $expected{$k}, 'pair: the target is exact after the contended rounds');

	# With a lease timeout the second waits for the first.
	my ($waiting, @pair) = launch_gated("SET dpwin.lease_timeout = '30s';\n", $route, $route);
	ok($waiting, 'pair with dpwin.lease_timeout: both sessions waited at the gate');
	my @res = map { [ outcome($_) ] } @pair;
	is(join(',', map { $_->[0] // $_->[2] } @res), 'completed,completed',
		'pair with dpwin.lease_timeout: both completed')
	  or diag(join("\n", map { $_->[3] // '' } @res));
	if (2 == grep { defined $_->[1] } @res)
	{
		is(psql_ok("SELECT count(*) FROM dpwin.invocation a, dpwin.invocation b"
				  . " WHERE a.invocation_id = '$res[0][1]' AND b.invocation_id = '$res[1][1]'"
				  . " AND (a.finished_at <= b.created_at OR b.finished_at <= a.created_at)"),
			1, 'pair with dpwin.lease_timeout: one ran after the other');
	}
	multiset_is(ch_rows("tgt$k"), $expected{$k}, 'pair: the target is exact after the serialized refreshes');
	is(leftovers(), 0, 'pair: no staging, generation or probe table is left');
	note(sprintf("part 3: %d contended rounds (%d losers named the winner) + 1 pair serialized by"
			  . " dpwin.lease_timeout; wall time %.2f s", $rounds, $named, time() - $t3));
}

# ---------------------------------------------------------------------
# 2. A pg_cron run firing while a slow refresh of its target runs; parts
#    1 and 3 run while the test waits for pg_cron's minute boundaries.
# ---------------------------------------------------------------------
{
	my $k = $nroutes;
	my $route = "${tag}_cron";
	my $job = "${tag}_cron";
	my $t2 = time();

	# The next minute boundary at least 6 s away, and the one after it;
	# pg_cron 1.4 reads schedules in GMT.
	my ($b1, $m1, $m2) = split /\|/, psql_ok(
		"SELECT extract(epoch FROM b), extract(minute FROM b AT TIME ZONE 'UTC'),"
		  . " extract(minute FROM (b + interval '1 minute') AT TIME ZONE 'UTC')"
		  . " FROM (SELECT date_trunc('minute', clock_timestamp() + interval '6 seconds')"
		  . "   + interval '1 minute' AS b) s");
	my $jobid = psql_ok("SELECT cron.schedule('$job', '$m1,$m2 * * * *',"
		  . " \$\$SELECT * FROM dpwin_refresh('$route', '$hi')\$\$)");

	# Use the wait for what fits in it.
	my ($part1_done, $part3_done) = (0, 0);
	if ($b1 - time() > 25)
	{
		part1();
		$part1_done = 1;
	}
	if ($b1 - time() > 15)
	{
		part3();
		$part3_done = 1;
	}

	# Start the slow refresh 4 s before the boundary: the first staging
	# INSERT of its route is held back for 8 s.
	usleep(1_000_000 * ($b1 - 4 - time())) if $b1 - 4 > time();
	fault(pattern => "INSERT INTO `$db`.`_dpwin_$rid{$k}_", count => 1, mode => 'delay', ms => 8000);
	my $slow = launch("SELECT 'R', state, invocation_id FROM dpwin_refresh('$route', '$hi');");
	ok(wait_until(sub {
		pump_all($slow);
		psql_ok("SELECT count(*) FROM dpwin.chunks WHERE route_name = '$route' AND state = 'running'") > 0
	}, 30), 'cron: the slow refresh is extracting, holding the lease');
	my $slow_inv = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$route'");
	my ($slow_state, $slow_id, undef, $slow_err) = outcome($slow);
	my $slow_end = psql_ok('SELECT clock_timestamp()');
	is($slow_state, 'completed', 'cron: the slow refresh completed') or diag($slow_err);
	is($slow_id, $slow_inv, 'cron: it is the invocation that held the lease');
	cmp_ok(time(), '>', $b1 + 1, 'cron: the slow refresh ran across the minute boundary');

	part1() unless $part1_done;
	part3() unless $part3_done;

	# The run at the next boundary completes.
	ok(wait_until(sub {
		psql_ok("SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid"
			  . " AND status IN ('succeeded', 'failed') AND start_time > '$slow_end'") >= 1
	}, $b1 + 60 + 30 - time()), 'cron: the run at the next minute ended');
	psql_ok("SELECT cron.unschedule($jobid)");
	ok(wait_until(sub {
		psql_ok("SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid"
			  . " AND status NOT IN ('succeeded', 'failed')") == 0 && dpwin_procs() == 0
	}, 30), 'cron: after cron.unschedule() no run and no dpwin process is left');

	my @runs = map { [ split /\|/, $_, 4 ] } split /\n/, psql_ok(
		"SELECT status, start_time < '$slow_end', end_time <= '$slow_end',"
		  . " replace(coalesce(return_message, ''), E'\\n', ' ')"
		  . " FROM cron.job_run_details WHERE jobid = $jobid ORDER BY runid");
	my @during = grep { $_->[1] eq 't' } @runs;
	my @after = grep { $_->[1] ne 't' } @runs;
	is(scalar(@during) . '|' . scalar(@after), '1|1', 'cron: one run while the slow refresh ran, one after it');
	is(join(',', map { $_->[0] } @during), 'failed', 'cron: the run during the slow refresh failed');
	like($_->[3], qr/leased by another dpwin invocation.*held by process \d+ \(dpwin coordinator\) running invocation \Q$slow_inv\E/,
		'cron: ... on the lease held by the slow refresh') for @during;
	is(join(',', map { $_->[2] } @during), 't', 'cron: ... and ended before the slow refresh did');
	is(join(',', map { $_->[0] } @after), 'succeeded', 'cron: the run after the slow refresh succeeded')
	  or diag(join("\n", map { $_->[3] } @after));
	is(psql_ok("SELECT count(*) FILTER (WHERE state = 'completed') || '|' || count(*)"
			  . " FROM dpwin.invocations WHERE route_name = '$route'"),
		'2|2', 'cron: two completed invocations (the slow one and the cron run), no other');
	multiset_is(ch_rows("tgt$k"), $expected{$k}, 'cron: the target is its kept old rows plus the source window');
	is(leftovers(), 0, 'cron: no staging, generation or probe table is left');
	is(psql_ok("SELECT count(*) FROM cron.job WHERE jobname = '$job'"), 0, 'cron: the job is gone');
	note(sprintf("part 2: %d cron runs (%d during the slow refresh, refused by the lease; %d after it);"
			  . " wall time %.2f s, parts 1 and 3 included", scalar(@runs), scalar(@during), scalar(@after),
			time() - $t2));
}

is(dpwin_procs(), 0, 'no dpwin process is left at the end');
is(psql_ok('SELECT count(*) FROM dpwin.progress'), 0, 'dpwin.progress is empty at the end');

# Clean up.
$gate->{in} .= "\\q\n";
finish($gate->{h});
ch_control('POST', '/faults/clear');
psql_ok("SELECT dpwin.drop_route(route_name) FROM dpwin.route WHERE route_name LIKE '${tag}_%'");
drop_fixture();
note(sprintf("total: %d target rows compared; wall time %.2f s", multiset_rows_compared(), time() - $t0));

done_testing();
