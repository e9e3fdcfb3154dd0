# CALL dpwin.backfill(route, from, to) (docs/guide.md, "Operating a
# route"): every window of the route's lookback that tiles [from, to) is
# published newest first, each through the ordinary refresh and committed
# on its own, on day-, month- and unpartitioned targets; the target then
# holds exactly the source's rows of the range and its own rows outside it
# (row multisets, independent of dpwin's digests). A backfill cancelled
# and then broken by a coordinator SIGKILL resumes the same row and skips
# the windows already published; a refresh can run between two windows and
# neither undoes the other; a backfill keeps one backup, the target as it
# was before; bad input is refused with its SQLSTATE before any I/O.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes ch_rows pg_rows multiset_is
  bg_psql bg_finish hold_session release_session hold_source release_source workers_held
  backup_tables coordinators_gone micros);
use DpwinCrash qw(crash coordinator_pid);

my $db = "t130_$$";
my $FROM = '2026-09-02 00:00:00+00';
my $TO = '2026-09-09 00:00:00+00';
my $N = 7;
my @routes;

fresh_fixture($db, $db);
psql_ok("CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz NOT NULL, v text);
	INSERT INTO $db.src
		SELECT g, timestamptz '2026-08-30 00:00:00+00' + g * interval '37 minutes 0.5 seconds', 'src ' || (g % 13)
		FROM generate_series(0, 600) g;
	INSERT INTO $db.src VALUES (7000, '2026-09-05 12:00:00+00', 'dup'), (7000, '2026-09-05 12:00:00+00', 'dup'),
		(7001, '2026-09-02 00:00:00+00', 'first instant'), (7002, '2026-09-08 23:59:59.999999+00', 'last instant');
	CREATE INDEX src_w ON $db.src (w);");

# Rows of the target outside [FROM, TO) (kept) and inside it (replaced).
my $OUTSIDE = "(1, '2026-08-20 00:00:00', 'kept before'), (1, '2026-08-20 00:00:00', 'kept before'),"
  . " (2, '2026-09-01 23:59:59.999999', 'kept edge'), (3, '2026-09-09 00:00:00', 'kept at to'),"
  . " (4, '2026-10-01 00:00:00', 'kept after')";
my $INSIDE = "(9001, '2026-09-02 00:00:00', 'stale'), (9002, '2026-09-05 06:00:00', 'stale'),"
  . " (9003, '2026-09-08 23:00:00', 'stale')";

sub target
{
	my ($t, $partition) = @_;
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w DateTime64(6, 'UTC'), v Nullable(String))"
		  . " ENGINE = MergeTree $partition ORDER BY id");
	ch_ok("INSERT INTO `$db`.`$t` VALUES $OUTSIDE, $INSIDE");
}

sub route
{
	my ($t, %o) = @_;
	my $r = unique_name("t130_$t");
	push @routes, $r;
	my $opt = join '', map { ", $_ => $o{$_}" } sort keys %o;
	psql_ok("SELECT dpwin.create_route('$r', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', '$t',"
		  . " interval '1 day', interval '12 hours', parallelism => 2$opt)");
	return $r;
}

my ($FROM_US, $TO_US) = (micros($FROM), micros($TO));

sub outside_rows
{
	my ($t) = @_;
	return [ grep { my ($w) = (split /\|/)[1]; $w < $FROM_US || $w >= $TO_US } @{ ch_rows($t) } ];
}

sub backfill_row
{
	my ($r) = @_;
	return psql_ok("SELECT backfill_id, state, windows_total, windows_done, calls, coalesce(error_sqlstate, '')"
		  . " FROM dpwin.backfills WHERE route_name = '$r' ORDER BY backfill_id DESC LIMIT 1");
}

# The coordinator exits once it has applied retention, after its caller
# returned: wait for it before counting tables.
# --- 1. day, month and unpartitioned targets ---------------------------------

for my $case ([ 'day', 'PARTITION BY toYYYYMMDD(w)' ], [ 'month', 'PARTITION BY toYYYYMM(w)' ], [ 'flat', '' ])
{
	my ($kind, $partition) = @$case;
	my $t = "tgt_$kind";
	target($t, $partition);
	my $r = route($t);
	my $before = ch_rows($t);
	my $kept = outside_rows($t);

	psql_ok("CALL dpwin.backfill('$r', '$FROM', '$TO')");
	is(backfill_row($r), (split /\|/, backfill_row($r))[0] . "|completed|$N|$N|1|",
		"$kind: the backfill is completed, $N windows of $N, in one call");
	multiset_is(ch_rows($t), [ @$kept, @{ pg_rows("w >= '$FROM' AND w < '$TO'") } ],
		"$kind: the target is the source over [from, to) and its own rows outside it");
	is(psql_ok("SELECT string_agg(to_char(i.interval_end AT TIME ZONE 'UTC', 'MM-DD'), ',' ORDER BY i.created_at)"
		  . " FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name = '$r' AND i.backfill_id IS NOT NULL AND i.state = 'completed'"),
		'09-09,09-08,09-07,09-06,09-05,09-04,09-03', "$kind: one invocation per window, newest first, each tied to the backfill");
	is(psql_ok("SELECT count(DISTINCT c.worker_pid) >= 1 AND bool_and(c.state = 'verified')"
		  . " FROM dpwin.chunk c JOIN dpwin.invocation i USING (invocation_id) JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name = '$r'"), 't', "$kind: every chunk of every window went through the workers and was verified");
	ok(coordinators_gone(), "$kind: the coordinators are gone");
	my $b = backup_tables($db, $r);
	is(scalar(@$b), 1, "$kind: one backup for the whole backfill") or diag("@$b");
	multiset_is(ch_rows($b->[0]), $before, "$kind: the backup is the target as it was before the backfill") if @$b;
	is(psql_ok("SELECT uncovered::text || '|' || status FROM dpwin.health WHERE route_name = '$r'"), '{}|stale',
		"$kind: dpwin.health shows no uncovered span (and stale data: 2026 is in the past here)")
	  if $kind eq 'day';
}

# --- 2. bad input, before any I/O ---------------------------------------------

target('tgt_bad', '');
my $rb = route('tgt_bad');
my $seq = ch_log_seq();
my @bad = (
	[ "CALL dpwin.backfill(NULL, '$FROM', '$TO')", qr/^22004: route must not be NULL/, 'a NULL route' ],
	[ "CALL dpwin.backfill('$rb', NULL, '$TO')", qr/^22004: from and to must not be NULL/, 'a NULL from' ],
	[ "CALL dpwin.backfill('$rb', '$FROM', NULL)", qr/^22004: from and to must not be NULL/, 'a NULL to' ],
	[ "CALL dpwin.backfill('$rb', '$TO', '$FROM')", qr/^22023: from .* is not before to/, 'from after to' ],
	[ "CALL dpwin.backfill('$rb', '$TO', '$TO')", qr/^22023: from .* is not before to/, 'from = to' ],
	[ "CALL dpwin.backfill('$rb', '2026-09-02 06:00:00+00', '$TO')",
		qr/^22023: the lookback 1 day of route "\Q$rb\E" does not tile/, 'a range the lookback does not tile' ],
	[ "CALL dpwin.backfill('no_such_route_$$', '$FROM', '$TO')", qr/^42704: route "no_such_route_$$" does not exist/,
		'an unknown route' ],
	[ "CALL dpwin.backfill('$rb', '1800-01-01 00:00:00+00', '1800-01-08 00:00:00+00')",
		qr/^22008: range .* is outside the range of ClickHouse DateTime64/, 'a range outside DateTime64' ],
	[ "CALL dpwin.backfill('$rb', '-infinity', '$TO')", qr/^22008: from and to must be finite/, 'an infinite from' ],
);
like(psql_err($_->[0]), $_->[1], "refused: $_->[2]") for @bad;
my (undef, undef, $hint) = psql("CALL dpwin.backfill('$rb', '2026-09-02 06:00:00+00', '$TO')");
like($hint, qr/HINT:\s+Pass from => '2026-09-02 00:00:00\+00' \(7 windows\) or '2026-09-03 00:00:00\+00' \(6 windows\)/,
	'the untiled range gets a hint with the two ranges that tile');
like(psql_err("BEGIN; CALL dpwin.backfill('$rb', '$FROM', '$TO'); COMMIT;"), qr/^2D000:/,
	'inside a transaction block the procedure cannot commit its windows (2D000)');

# a route in use: another session runs a backfill of it (holds its lock)
my $rid_b = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$rb'");
my $h = hold_session("SELECT pg_advisory_lock(dpwin.backfill_lock_class(), $rid_b)");
like(psql_err("CALL dpwin.backfill('$rb', '$FROM', '$TO')"), qr/^55006: route "\Q$rb\E" is in use by backfill/,
	'refused: a route another session backfills (55006)');
(undef, undef, $hint) = psql("CALL dpwin.backfill('$rb', '$FROM', '$TO')");
like($hint, qr/HINT:\s+Wait for it to finish/, 'with a hint');
release_session($h);
is(scalar(ch_log_since($seq)), 0, 'no statement of the refused calls reached ClickHouse');
is(psql_ok("SELECT count(*) FROM dpwin.invocation i JOIN dpwin.route r USING (route_id) WHERE r.route_name = '$rb'"),
	0, 'and no invocation was journaled');

# --- 3. cancelled, then its coordinator killed, then resumed -------------------

target('tgt_resume', 'PARTITION BY toYYYYMMDD(w)');
my $rr = route('tgt_resume');
my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$rr'");
my $before = ch_rows('tgt_resume');
my $kept = outside_rows('tgt_resume');
my $call = "CALL dpwin.backfill('$rr', '$FROM', '$TO')";

# The window of the backfill of $rr that is running now, once its workers
# wait at the held source.
sub running_window
{
	my $inv;
	ok(wait_until(sub {
			$inv = psql_ok("SELECT invocation_id FROM dpwin.invocation WHERE route_id = $rid AND backfill_id IS NOT NULL"
				  . " AND state NOT IN ('completed', 'failed', 'abandoned', 'snapshot_expired')");
			$inv ne '' && workers_held($inv, 1, 2);
		}, 120), 'a window of the backfill is held in its extraction');
	return $inv;
}

# The backfill's running window is held at the source ($hs): let it
# finish while the backfill's row is locked (the next window cannot be
# recorded; a window's registration only reads the row), hold the source
# again while no window reads it (a window reading it would stall behind
# the REINDEX), and let the next window start.  Returns the new hold and
# that window's invocation, held at the source.
sub next_window
{
	my ($hs) = @_;
	my $bid = (split /\|/, backfill_row($rr))[0];
	my $done = (split /\|/, backfill_row($rr))[3];
	my $row = hold_session("SELECT 1 FROM dpwin.backfill WHERE backfill_id = $bid FOR NO KEY UPDATE");
	release_source($hs);
	ok(wait_until(sub {
			psql_ok("SELECT count(*) FROM pg_stat_activity WHERE application_name = 't130_backfill'"
				  . " AND wait_event_type = 'Lock'") == 1
		}, 120), 'the backfill waits between two windows');
	is((split /\|/, backfill_row($rr))[3], $done + 1, 'the held window was published');
	$hs = hold_source("$db.src", 'src_w');
	release_session($row);
	return ($hs, running_window());
}

my $hs = hold_source("$db.src", 'src_w');
my $bg = bg_psql($call, 't130_backfill');
running_window();
my $inv1;
($hs, $inv1) = next_window($hs);
is(psql_ok("SELECT p.backfill_window || '/' || p.backfill_windows || ' ' || (p.backfill_rows >= b.rows_done)"
	  . " || ' ' || b.current_window || '/' || b.windows_total || ' ' || (b.rows_done > 0) || ' ' || b.state"
	  . " FROM dpwin.progress p JOIN dpwin.backfills b USING (backfill_id) WHERE p.invocation_id = '$inv1'"),
	"2/$N true 2/$N true running",
	'dpwin.progress and dpwin.backfills show window 2 of 7 running, the rows of window 1 counted');
psql_ok("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 't130_backfill'");
my ($rc, undef, $err) = bg_finish($bg);
like($err, qr/ERROR:\s+57014:/, 'the cancelled CALL fails with 57014');
like($err, qr/HINT:.*CALL dpwin\.backfill\(.*\) resumes the backfill/, 'and says how to resume');
release_source($hs);
my ($bid, $state, $total, $done, $calls, $sqlstate) = split /\|/, backfill_row($rr);
is("$state|$sqlstate|$calls|$done", 'failed|57014|1|1', 'the backfill is failed with the cancel, one window published');
ok(wait_until(sub { psql_ok("SELECT state FROM dpwin.invocation WHERE invocation_id = '$inv1'") eq 'failed' }, 60),
	'the cancelled window is failed');

$hs = hold_source("$db.src", 'src_w');
$bg = bg_psql($call, 't130_backfill');
running_window();
my $inv2;
($hs, $inv2) = next_window($hs);
my $pid = coordinator_pid($inv2);
ok($pid, "the window's coordinator holds the lease ($pid)");
crash([$pid], $bg, 'coordinator of a backfill window');
bg_finish($hs);	# the source's holder went with the crash restart
my (undef, $st2, undef, $done2, $calls2) = split /\|/, backfill_row($rr);
is("$st2|$done2|$calls2", 'interrupted|2|2',
	'after the crash the backfill is interrupted (running, no session holds it), one window published by each call');

my %published_before = map { $_ => 1 } split /\n/,
  psql_ok("SELECT invocation_id FROM dpwin.invocation WHERE route_id = $rid AND state = 'completed'");
psql_ok($call);
($bid, $state, $total, $done, $calls, $sqlstate) = split /\|/, backfill_row($rr);
is("$state|$done|$calls", "completed|$N|3", 'the third call completes the same backfill row');
is(psql_ok("SELECT count(DISTINCT backfill_id) FROM dpwin.invocation WHERE route_id = $rid"), 1,
	'every window of the three calls belongs to the one backfill');
is(psql_ok("SELECT count(*) FROM (SELECT interval_end FROM dpwin.invocation WHERE route_id = $rid"
	  . " AND state = 'completed' GROUP BY interval_end HAVING count(*) > 1) d"), 0,
	'no window was published twice: the resumed calls skipped the published ones');
is(psql_ok("SELECT state FROM dpwin.invocation WHERE invocation_id = '$inv2'"), 'snapshot_expired',
	'the window whose coordinator died was settled (its snapshot expired) before the backfill went on');
multiset_is(ch_rows('tgt_resume'), [ @$kept, @{ pg_rows("w >= '$FROM' AND w < '$TO'") } ],
	'after a cancel, a crash and a resume the target is the source over [from, to) and its own rows outside');
ok(coordinators_gone(), 'the coordinators are gone');
my $b = backup_tables($db, $rr);
is(scalar(@$b), 1, 'one backup for the whole backfill across three calls') or diag("@$b");
multiset_is(ch_rows($b->[0]), $before, 'the backup is the target as it was before the backfill') if @$b;

# --- 4. a scheduled refresh between two windows -------------------------------

target('tgt_sched', 'PARTITION BY toYYYYMM(w)');
my $rs = route('tgt_sched');
my $rid_s = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$rs'");
$kept = outside_rows('tgt_sched');
# published before the backfill began: the backfill publishes it again
is(psql_ok("SELECT state FROM dpwin_refresh('$rs', '2026-09-04 00:00:00+00')"), 'completed',
	'a window of the range is published before the backfill begins');
$hs = hold_source("$db.src", 'src_w');
$bg = bg_psql("CALL dpwin.backfill('$rs', '$FROM', '$TO')", 't130_sched');
my $first;
ok(wait_until(sub {
		$first = psql_ok("SELECT invocation_id FROM dpwin.invocation WHERE route_id = $rid_s AND state = 'extracting'");
		$first ne '' && workers_held($first, 1, 2);
	}, 120), 'the first window is held in its extraction');
my $bf = psql_ok("SELECT backfill_id FROM dpwin.backfill WHERE route_id = $rid_s");
# the backfill cannot record its next window while this row is locked
my $row = hold_session("SELECT 1 FROM dpwin.backfill WHERE backfill_id = $bf FOR NO KEY UPDATE");
release_source($hs);
ok(wait_until(sub {
		psql_ok("SELECT count(*) FROM pg_stat_activity WHERE application_name = 't130_sched' AND wait_event_type = 'Lock'") == 1
	}, 120), 'the backfill waits between its first and second window');
is(psql_ok("SELECT state FROM dpwin.invocation WHERE invocation_id = '$first'"), 'completed', 'its first window is published');
my $NEXT = '2026-09-10 00:00:00+00';
is(psql_ok("SELECT state FROM dpwin_refresh('$rs', '$NEXT')"), 'completed',
	'a scheduled refresh of the newest window runs between two windows of the backfill');
is(psql_ok("SELECT state FROM dpwin_refresh('$rs', '2026-09-06 00:00:00+00')"), 'completed',
	'and a refresh of a window the backfill has not reached yet');
release_session($row);
($rc, undef, $err) = bg_finish($bg);
is($rc, 0, 'the backfill completes') or diag($err);
is(psql_ok("SELECT count(*) FROM dpwin.invocation WHERE route_id = $rid_s AND backfill_id = $bf AND state = 'completed'"),
	$N - 1, 'the backfill skipped the window the refresh published after it began, not the one published before');
is(psql_ok("SELECT last_interval_end = '$NEXT' FROM dpwin.route_state WHERE route_id = $rid_s"), 't',
	'route_state keeps the newest interval_end: the older windows published after it did not move it back');
multiset_is(ch_rows('tgt_sched'),
	[ (grep { (split /\|/)[1] < $TO_US || (split /\|/)[1] >= micros($NEXT) } @$kept),
		@{ pg_rows("w >= '$FROM' AND w < '$NEXT'") } ],
	'the target holds both: the backfill did not undo the newer window, nor the refresh the backfill\'s');

drop_routes(@routes);
drop_fixture();
done_testing();
