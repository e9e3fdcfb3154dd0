# The publication half against real PostgreSQL and the real engine: a
# window refresh over a target that already holds rows before, after and
# inside the window, NULL-window rows and duplicates; an empty source
# window; the same interval_end refreshed again; route_state that never
# moves backwards; dpwin.drop_backups().  Every check compares the full
# multiset of rows, not counts.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes create_event_table ch_rows pg_rows uuid_of micros kept
  own_tables);

my $db = "t060_$$";
my $schema = "t060_$$";
my $srv = 'sandbox_ch';
my $route = unique_name('t060r');
my $table = 'events';

sub refresh
{
	my ($end) = @_;
	my $out = psql_ok("SELECT invocation_id, state, source_rows, final_rows, backup_table"
		  . " FROM dpwin_refresh('$route', '$end')");
	my %r;
	@r{qw(id state source_rows final_rows backup)} = split /\|/, $out;
	return \%r;
}

# Check one completed refresh: the target is exactly kept(pre) + the
# source's window rows, the previous generation is the backup, and the
# journal agrees with the tables.
sub check_refresh
{
	my ($label, $r, $pre, $pre_uuid, $lo, $hi, $end) = @_;
	my $src = pg_rows("w >= timestamptz '" . $lo->[0] . "' AND w < timestamptz '" . $hi->[0] . "'");
	my $expected = [ sort(@{ kept($pre, $lo->[1], $hi->[1]) }, @$src) ];

	is($r->{state}, 'completed', "$label: completed");
	is($r->{source_rows}, scalar(@$src), "$label: source_rows is the source window's row count");
	is($r->{final_rows}, scalar(@$expected), "$label: final_rows is the new generation's row count");
	is_deeply(ch_rows($table), $expected,
		"$label: target = rows outside the window and NULL-window rows + the source window, duplicates kept");

	ok($r->{backup}, "$label: a backup is named");
	is_deeply(ch_rows($r->{backup}), $pre, "$label: the backup holds exactly the previous generation");
	is(uuid_of($r->{backup}), $pre_uuid, "$label: the backup is the previous target table (same UUID)");

	my ($before, $gen_uuid, $outcome, $backup) = split /\|/,
	  psql_ok("SELECT target_uuid_before, generation_uuid, outcome, backup_table"
		  . " FROM dpwin.publication WHERE invocation_id = '$r->{id}'");
	is($before, $pre_uuid, "$label: the intent recorded the target's UUID before the exchange");
	is(uuid_of($table), $gen_uuid, "$label: the target's UUID is the generation UUID of the intent");
	is($outcome, 'published', "$label: the intent's outcome is published");
	is($backup, $r->{backup}, "$label: the intent names the backup");

	is(psql_ok("SELECT state || ' ' || chunks || ' ' || chunks_verified FROM dpwin.invocations"
		  . " WHERE invocation_id = '$r->{id}'"), 'completed 4 4',
		"$label: invocation completed, every chunk verified");
	is(psql_ok("SELECT sum(rows) FROM dpwin.chunk WHERE invocation_id = '$r->{id}'"),
		scalar(@$src), "$label: the chunk journal's rows add up to the source window");
	is(psql_ok("SELECT (metrics->>'source_rows') || ' ' || (metrics->>'target_rows') || ' ' || (metrics->>'kept_rows')"
		  . " FROM dpwin.evidence WHERE invocation_id = '$r->{id}'"),
		scalar(@$src) . ' ' . scalar(@$expected) . ' ' . (scalar(@$expected) - scalar(@$src)),
		"$label: evidence counts");
	is(scalar(@{ own_tables($route, $r->{id}) }), 0, "$label: no staging or generation table is left");
}

# --- setup ---------------------------------------------------------------

fresh_fixture($db, $schema);
create_event_table($table);
psql_ok("CREATE TABLE $schema.src (id bigint NOT NULL, w timestamptz, v text);
	SELECT dpwin.create_route('$route', '$schema.src'::regclass, 'w', '$srv', '$db', '$table',
		interval '1 day', interval '6 hours', parallelism => 3,
		keep_backups => 100);");	# every backup kept: section 5 drops them by hand

my $E1 = '2026-09-09 00:00:00+00';
my $E2 = '2026-09-10 00:00:00+00';
my @W1 = ([ '2026-09-08 00:00:00+00', micros('2026-09-08 00:00:00+00') ],
	[ $E1, micros($E1) ]);
my @W2 = ([ $E1, micros($E1) ], [ $E2, micros($E2) ]);

# The target before the first refresh: rows before and after the window
# (both bounds to the microsecond), NULL-window rows, rows inside the
# window that the refresh replaces, and duplicates of each kind.
ch_ok("INSERT INTO `$db`.`$table` VALUES
	(1, '2026-09-07 12:00:00', 'before'), (1, '2026-09-07 12:00:00', 'before'),
	(2, '2026-09-07 23:59:59.999999', 'just before lo'),
	(3, '2026-09-09 00:00:00', 'at hi'),
	(4, '2026-09-10 08:00:00.123456', 'after'), (4, '2026-09-10 08:00:00.123456', 'after'),
	(5, NULL, 'null window'), (5, NULL, 'null window'), (6, NULL, NULL),
	(7, '2026-09-08 00:00:00', 'old at lo'),
	(8, '2026-09-08 12:00:00', 'old'), (8, '2026-09-08 12:00:00', 'old'),
	(9, '2026-09-08 23:59:59.999999', 'old just before hi')");

# The source: the window's new rows with duplicates, and rows that must not
# be extracted (before lo, at hi, NULL window).
psql_ok("INSERT INTO $schema.src VALUES
	(100, '2026-09-08 00:00:00+00', 'new at lo'),
	(150, '2026-09-08 06:00:00+00', 'dup on a chunk bound'),
	(150, '2026-09-08 06:00:00+00', 'dup on a chunk bound'),
	(150, '2026-09-08 06:00:00+00', 'dup on a chunk bound'),
	(151, '2026-09-08 13:13:13.131313+00', NULL),
	(151, '2026-09-08 13:13:13.131313+00', NULL),
	(152, '2026-09-08 23:59:59.999999+00', 'new just before hi'),
	(8, '2026-09-08 12:00:00+00', 'old'),
	(200, '2026-09-09 00:00:00+00', 'source at hi'),
	(201, '2026-09-07 23:59:59.999999+00', 'source before lo'),
	(202, NULL, 'source null'), (202, NULL, 'source null');
	INSERT INTO $schema.src
		SELECT 1000 + g, timestamptz '2026-09-08 00:00:00+00' + g * interval '7 minutes 3.000001 seconds',
			   'row ' || g
		FROM generate_series(0, 200) g;");

# --- 1. a window refresh over a populated target ---------------------------

my $pre = ch_rows($table);
my $pre_uuid = uuid_of($table);
is(scalar(@$pre), 13, 'the target starts with 13 rows');
my $r1 = refresh($E1);
check_refresh('first refresh', $r1, $pre, $pre_uuid, @W1, $E1);
is(psql_ok("SELECT last_interval_end = '$E1' AND invocation_id = '$r1->{id}' FROM dpwin.route_state"
	  . " JOIN dpwin.route USING (route_id) WHERE route_name = '$route'"), 't',
	'route_state advanced to the first interval_end');

# --- 2. an empty source window removes only the window's target rows --------

ch_ok("INSERT INTO `$db`.`$table` VALUES
	(300, '2026-09-09 10:00:00', 'in the second window'),
	(300, '2026-09-09 10:00:00', 'in the second window'),
	(301, '2026-09-09 23:59:59.999999', 'last microsecond')");
psql_ok("DELETE FROM $schema.src WHERE w >= '$E1' AND w < '$E2'");
is(scalar(@{ pg_rows("w >= '$E1' AND w < '$E2'") }), 0, 'the source has no row in the second window');
$pre = ch_rows($table);
$pre_uuid = uuid_of($table);
my $in_w2 = scalar(@$pre) - scalar(@{ kept($pre, $W2[0][1], $W2[1][1]) });
is($in_w2, 4, 'the target has 4 rows in the second window (one at its lower bound)');
my $r2 = refresh($E2);
check_refresh('empty window', $r2, $pre, $pre_uuid, @W2, $E2);
is($r2->{source_rows}, 0, 'empty window: no source rows');
is(psql_ok("SELECT last_interval_end = '$E2' AND invocation_id = '$r2->{id}' FROM dpwin.route_state"
	  . " JOIN dpwin.route USING (route_id) WHERE route_name = '$route'"), 't',
	'route_state advanced to the second interval_end');

# --- 3. the same interval_end again: same rows, one more backup -------------

my %backups = ($r1->{backup} => 1, $r2->{backup} => 1);
my @again;
for my $n (1 .. 2)
{
	$pre = ch_rows($table);
	$pre_uuid = uuid_of($table);
	my $r = refresh($E1);
	check_refresh("first window again ($n)", $r, $pre, $pre_uuid, @W1, $E1);
	is_deeply(ch_rows($table), $pre, "first window again ($n): idempotent, the target's rows did not change");
	ok(!$backups{ $r->{backup} }, "first window again ($n): a new backup table");
	$backups{ $r->{backup} } = 1;
	push @again, $r;
}
$pre = ch_rows($table);
$pre_uuid = uuid_of($table);
my $r5 = refresh($E2);
check_refresh('empty window again', $r5, $pre, $pre_uuid, @W2, $E2);
is_deeply(ch_rows($table), $pre, 'empty window again: idempotent');
ok(!$backups{ $r5->{backup} }, 'empty window again: a second backup of the same interval_end');
$backups{ $r5->{backup} } = 1;

# --- 4. route_state never moves backwards -----------------------------------

is(psql_ok("SELECT last_interval_end = '$E2' AND invocation_id = '$r2->{id}' FROM dpwin.route_state"
	  . " JOIN dpwin.route USING (route_id) WHERE route_name = '$route'"), 't',
	'route_state stays at the newest interval_end after older and equal ones were refreshed');

# --- 5. drop_backups keeps the newest publications ---------------------------

my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$route'");
my @all = sort split /\n/, ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
	  . " AND startsWith(name, '_dpwin_backup_${rid}_') FORMAT TSVRaw");
is_deeply(\@all, [ sort keys %backups ], 'one backup per publication, all kept by dpwin');
my @dropped = sort split /\n/, psql_ok("SELECT * FROM dpwin.drop_backups('$route', 2)");
is_deeply(\@dropped, [ sort($r1->{backup}, $r2->{backup}, $again[0]{backup}) ],
	'drop_backups(route, 2) drops all but the two newest publications, whatever their interval_end');
my @left = sort split /\n/, ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
	  . " AND startsWith(name, '_dpwin_backup_${rid}_') FORMAT TSVRaw");
is_deeply(\@left, [ sort($again[1]{backup}, $r5->{backup}) ], 'the two newest backups are left');
is(psql_ok("SELECT count(*) FROM dpwin.drop_backups('$route', 2)"), 0, 'drop_backups again drops nothing');
is(psql_ok("SELECT count(*) FROM dpwin.drop_backups('$route', 0)"), 2, 'drop_backups(route, 0) drops the rest');
like(psql_err("SELECT * FROM dpwin.drop_backups('$route', -1)"), qr/^22023: keep must be zero or more, not -1/, 'keep < 0 is refused');
is_deeply(ch_rows($table), $pre, 'dropping backups leaves the target alone');

# --- 6. many chunks: the result row still carries the whole evidence ----------

my $route_many = unique_name('t060many');
create_event_table('many');
psql_ok("SELECT dpwin.create_route('$route_many', '$schema.src'::regclass, 'w', '$srv', '$db', 'many',"
	  . " interval '7 days', interval '30 minutes', parallelism => 4)");
my ($inv_many, $nchunks, $same) = split /\|/,
  psql_ok("CREATE TEMP TABLE r AS SELECT * FROM dpwin_refresh('$route_many', '$E1');"
	  . " SELECT r.invocation_id, jsonb_array_length(r.details->'evidence'->'chunk_metrics'),"
	  . " r.details = i.result FROM r JOIN dpwin.invocation i USING (invocation_id)");
is($nchunks, 336, 'many chunks: the result row has the metrics of all 336 chunks');
is($same, 't', 'many chunks: the result row is the journaled result');
is_deeply(ch_rows('many'), pg_rows("w >= timestamptz '$E1' - interval '7 days' AND w < '$E1'"),
	'many chunks: the target holds the source window');

# --- clean up -------------------------------------------------------------

drop_routes($route, $route_many);
drop_fixture();

done_testing();
