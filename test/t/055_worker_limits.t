# What a refresh may run at once, and what happens when the server runs
# out (docs/guide.md, "Settings"; docs/recovery.md, rows 1 and 2):
#
# * dpwin.max_workers caps a route's parallelism: with the cap below it,
#   exactly that many chunk workers run (without it, the route's
#   parallelism does);
# * dpwin.retry_backoff is the delay before a chunk's first retry, doubled
#   before the second (from the endpoint's arrival times);
# * no free background worker slot for a chunk worker: 53400, the
#   invocation failed, nothing left behind;
# * no free slot for the coordinator: 53400 before anything is journaled;
# * every dpwin.max_invocations progress slot in use: 53400, the
#   invocation failed; once slots are free again the route refreshes.
#
# Refreshes are held with their chunk workers inside a chunk by the source
# barrier (DpwinFixture::hold_source), so every count is taken while
# nothing moves.  The settings are server settings (ALTER SYSTEM; the slot
# limits need a restart); they are put back at the end.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault fresh_fixture drop_fixture create_event_source new_event_route ch_rows uuid_of
  new_uuid route_id invocation_prefix own_tables refresh_row_sql bg_psql bg_finish hold_source release_source
  workers_held cluster_processes pg_log_mark pg_log_since);
use DpwinCrash qw(sandbox_cmd coordinator_pid);

my $db = "t055_$$";
my $E = '2026-09-09 00:00:00+00';

# ALTER SYSTEM $name = $value (RESET for undef), and wait until new
# sessions, and so new background workers, see it.
my %changed;

sub set_server
{
	my (%set) = @_;
	for my $name (sort keys %set)
	{
		$changed{$name} = 1;
		psql_ok(defined $set{$name} ? "ALTER SYSTEM SET $name = '$set{$name}'" : "ALTER SYSTEM RESET $name");
	}
	psql_ok('SELECT pg_reload_conf()');
}

sub show { return psql_ok("SHOW $_[0]"); }

my $restarted;

END
{
	# Whatever happened, leave the sandbox as it was.
	if (%changed)
	{
		psql("ALTER SYSTEM RESET $_") for sort keys %changed;
		if ($restarted) { sandbox_cmd('restart-pg'); }
		else { psql('SELECT pg_reload_conf()'); }
	}
}

sub chunk_workers_of
{
	my ($inv) = @_;
	return scalar(keys %{ cluster_processes(qr/dpwin chunk worker .*\Q$inv\E/) });
}

sub dpwin_procs
{
	return psql_ok("SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('dpwin coordinator', 'dpwin chunk worker')");
}

# The whole error of a statement expected to fail (with DETAIL and HINT).
sub error_of
{
	my ($sql) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\n$sql");
	return $rc ? $err : "no error: $out";
}

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
create_event_source();

# ---- dpwin.max_workers ------------------------------------------------------------

{
	my ($route, $t) = new_event_route('cap');
	psql_ok("SELECT dpwin.alter_route('$route', parallelism => 4)");
	for my $case ([ 'no cap below the parallelism', undef, 4 ], [ 'dpwin.max_workers = 2', 2, 2 ])
	{
		my ($label, $cap, $n) = @$case;
		set_server('dpwin.max_workers' => $cap);
		ok(wait_until(sub { show('dpwin.max_workers') eq ($cap // 16) }, 30), "$label: the server runs with it");
		my $inv = new_uuid();
		my $barrier = hold_source("$db.src", 'src_w');
		my $h = bg_psql(refresh_row_sql($route, $E, $inv));
		is(scalar(workers_held($inv, $n)), $n, "$label: $n chunk workers are inside a chunk");
		my $coord = coordinator_pid($inv);
		# The coordinator starts every worker before it waits for them.
		ok(wait_until(sub { psql_ok("SELECT wait_event FROM pg_stat_activity WHERE pid = $coord") eq 'Extension' }, 30),
			"$label: the coordinator has started its workers and waits for them");
		is(chunk_workers_of($inv), $n, "$label: and there are no more than $n");
		release_source($barrier);
		my ($rc, $out, $err) = bg_finish($h);
		like($out, qr/^\Q$inv\E\|completed\|/, "$label: the refresh completes") or diag($err);
		is(psql_ok("SELECT count(DISTINCT worker_pid) FROM dpwin.chunk WHERE invocation_id = '$inv'"), $n,
			"$label: $n workers shared the four chunks");
	}
	set_server('dpwin.max_workers' => undef);
}

# ---- dpwin.retry_backoff -------------------------------------------------------------

{
	set_server('dpwin.retry_backoff' => '2000ms');
	ok(wait_until(sub { show('dpwin.retry_backoff') eq '2s' }, 30), 'backoff: the server runs with 2s');
	my ($route, $t) = new_event_route('backoff');
	my $inv = new_uuid();
	my $stg = invocation_prefix(route_id($route), $inv) . 'stg_1_';
	fault(pattern => "INSERT INTO `$db`.`$stg$_` (", mode => 'error', code => 1000, count => 1) for 0, 1;
	my $seq = ch_log_seq();
	my $mark = pg_log_mark();
	like(psql_ok(refresh_row_sql($route, $E, $inv)), qr/\|completed\|/, 'backoff: the refresh completes');
	my @log = ch_log_since($seq);
	# attempt n fails at its INSERT; attempt n+1 begins with creating its
	# staging table
	my @gaps;
	for my $a (0, 1)
	{
		my ($fail) = grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$stg$a\E` / } @log;
		my ($next) = grep { $_->{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q$stg\E${\ ($a + 1)}` / } @log;
		push @gaps, $fail && $next ? $next->{ms} - $fail->{ms} : -1;
	}
	is(psql_ok("SELECT attempt || ' ' || state FROM dpwin.chunk WHERE invocation_id = '$inv' AND chunk_no = 1"),
		'2 verified', 'backoff: chunk 1 verified at its third attempt');
	# The worker's log line names each backoff it waits: the server's
	# 2000 ms, then doubled.  Each retry comes no sooner (the gap is the
	# backoff plus the time to journal the failure and start the next
	# attempt, which a loaded machine lengthens: no upper bound).
	my $server_log = pg_log_since($mark);
	is(join(' ', $server_log =~ /dpwin: attempt \d of chunk 1 failed, retrying in (\d+) ms/g), '2000 4000',
		'backoff: the worker waits 2000 ms before its first retry, 4000 ms (doubled) before its second');
	cmp_ok($gaps[0], '>=', 2000, 'backoff: the first retry comes 2000 ms after the failure or later');
	cmp_ok($gaps[1], '>=', 4000, 'backoff: the second 4000 ms after the second failure or later');
	set_server('dpwin.retry_backoff' => undef);
}

# ---- background worker and progress slots --------------------------------------------

# A small server: few background worker slots, two progress slots.
psql_ok("ALTER SYSTEM SET max_worker_processes = 8");
psql_ok("ALTER SYSTEM SET dpwin.max_invocations = 2");
@changed{ 'max_worker_processes', 'dpwin.max_invocations' } = (1, 1);
$restarted = 1;
sandbox_cmd('restart-pg');
is(show('max_worker_processes') . ' ' . show('dpwin.max_invocations'), '8 2',
	'slots: the server runs with 8 worker slots and 2 dpwin invocations');

# Checks that a refused refresh left nothing: the journal says failed with
# 53400, the target is as it was, no table of it is left.
sub refused_cleanly
{
	my ($label, $route, $t, $inv, $pre, $pre_uuid) = @_;
	is(psql_ok("SELECT state || ' ' || error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"),
		'failed 53400', "$label: the invocation is failed with 53400");
	is_deeply(ch_rows($t), $pre, "$label: the target's rows are untouched");
	is(uuid_of($t), $pre_uuid, "$label: same table");
	is_deeply(own_tables($route, $inv), [], "$label: no staging table of it is left");
}

# No slot for every chunk worker: parallelism 16 (24 one-hour chunks), more
# than the server has slots.
my $free;
{
	my $label = 'worker slots';
	my ($route, $t) = new_event_route('wslots');
	psql_ok("SELECT dpwin.alter_route('$route', chunk_interval => interval '1 hour', parallelism => 16)");
	my ($pre, $pre_uuid) = (ch_rows($t), uuid_of($t));
	my $inv = new_uuid();
	my $barrier = hold_source("$db.src", 'src_w');
	my $err = error_of(refresh_row_sql($route, $E, $inv));
	like($err, qr/ERROR:\s+53400: could not start dpwin chunk worker (\d+) of 16/, "$label: 53400, naming the worker")
	  or diag($err);
	($free) = $err =~ /chunk worker (\d+) of/;
	like($err, qr/HINT:\s+Raise max_worker_processes, or lower the route's parallelism or dpwin\.max_workers\./,
		"$label: the hint names what to change");
	release_source($barrier);
	refused_cleanly($label, $route, $t, $inv, $pre, $pre_uuid);
	ok(wait_until(sub { dpwin_procs() == 0 }, 30), "$label: no dpwin process is left");
}

# No slot for the coordinator: a held refresh uses every free slot (its
# coordinator plus $free - 1 workers: what the refresh above got).
{
	my $label = 'coordinator slot';
	my ($hog) = new_event_route('hog');
	my ($route, $t) = new_event_route('cslot');
	psql_ok("SELECT dpwin.alter_route('$hog', chunk_interval => interval '1 hour', parallelism => " . ($free - 1) . ")");
	my ($pre, $pre_uuid) = (ch_rows($t), uuid_of($t));
	my $hog_inv = new_uuid();
	my $barrier = hold_source("$db.src", 'src_w');
	my $h = bg_psql(refresh_row_sql($hog, $E, $hog_inv));
	is(scalar(workers_held($hog_inv, $free - 1)), $free - 1, "$label: a refresh holds all $free free slots");
	my $inv = new_uuid();
	my $err = error_of(refresh_row_sql($route, $E, $inv));
	like($err, qr/ERROR:\s+53400: could not start a dpwin coordinator: no free background worker slot/,
		"$label: another refresh fails with 53400") or diag($err);
	like($err, qr/HINT:\s+Raise max_worker_processes/, "$label: the hint names max_worker_processes");
	is(psql_ok("SELECT count(*) FROM dpwin.invocations WHERE route_name = '$route'"), 0,
		"$label: nothing was journaled for it");
	is_deeply(ch_rows($t), $pre, "$label: its target is untouched");
	release_source($barrier);
	like((bg_finish($h))[1], qr/\|completed\|/, "$label: the holding refresh completes");
}

# Every progress slot in use: two held refreshes, then a third.
{
	my $label = 'progress slots';
	my ($r1) = new_event_route('inv1');
	my ($r2) = new_event_route('inv2');
	psql_ok("SELECT dpwin.alter_route(r, parallelism => 1) FROM unnest(ARRAY['$r1', '$r2']) r");
	my ($route, $t) = new_event_route('inv3');
	my ($pre, $pre_uuid) = (ch_rows($t), uuid_of($t));
	my $barrier = hold_source("$db.src", 'src_w');
	my @held;
	for my $r ($r1, $r2)
	{
		my $inv = new_uuid();
		push @held, bg_psql(refresh_row_sql($r, $E, $inv));
		is(scalar(workers_held($inv, 1)), 1, "$label: a refresh of $r is held");
	}
	is(psql_ok('SELECT count(*) FROM dpwin.progress'), 2, "$label: both progress slots are in use");
	my $inv = new_uuid();
	my $err = error_of(refresh_row_sql($route, $E, $inv));
	like($err, qr/ERROR:\s+53400: too many dpwin invocations are running/, "$label: a third refresh fails with 53400")
	  or diag($err);
	like($err, qr/DETAIL:\s+All 2 progress slots are in use\./, "$label: the detail counts the slots");
	like($err, qr/HINT:\s+Raise dpwin\.max_invocations \(requires a restart\)\./, "$label: the hint names the setting");
	refused_cleanly($label, $route, $t, $inv, $pre, $pre_uuid);
	release_source($barrier);
	like((bg_finish($_))[1], qr/\|completed\|/, "$label: a held refresh completes") for @held;
	ok(wait_until(sub { dpwin_procs() == 0 }, 30), "$label: no dpwin process is left");
	is(psql_ok('SELECT count(*) FROM dpwin.progress'), 0, "$label: the slots are free again");
	like(psql_ok(refresh_row_sql($route, $E)), qr/\|completed\|/, "$label: the refused route now refreshes");
}

drop_fixture();
done_testing();
