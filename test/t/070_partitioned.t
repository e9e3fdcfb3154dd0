# Publication by cloning on every target shape (src/generation.c).
#
# For targets partitioned by day (Nullable key with allow_nullable_key, and
# with ifNull(..., 0)), by week (NULL window rows sharing a week with
# values), unpartitioned, partitioned without the window column, and with
# lightweight-deleted rows: the window [09-09 12:00, 09-12 12:00) starts
# and ends mid-partition; the target holds stale rows inside the window,
# kept rows outside it, NULL window rows and duplicates, spread over
# several parts per partition.  After each refresh the whole target must
# equal, as a multiset, the kept rows plus the source's window.  The
# endpoint's query log must show that every partition not wholly inside
# the window was cloned from the target by ATTACH PARTITION, that the
# staged rows were ATTACHed too, and that no row went through an INSERT
# ... SELECT.  Then, with the endpoint holding back the build, a merge of
# a cloned partition must be tolerated (digest fallback), and a new kept
# row in a cloned partition must be refused, while the target is cloned
# and right before the exchange; so must a row added to or deleted from a
# partition of the generation that was cloned whole, while a merge there
# is tolerated.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture pg_row_sql ch_row_sql sorted_lines multiset_is fault wait_logged
  new_uuid generation_name route_id invocation_prefix);
use DpwinEndpoint qw(release wait_running);
use IPC::Run qw(start finish timeout);

my $tag = "t070_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';

my $lo = '2026-09-09 12:00:00+00';
my $hi = '2026-09-12 12:00:00+00';
my $pg_keep = "(w < '$lo' OR w >= '$hi' OR w IS NULL)";
my $pg_in = "(w >= '$lo' AND w < '$hi')";

my $pg_row = pg_row_sql();
my $ch_row = ch_row_sql();

sub ch_list
{
	my ($sql) = @_;
	return [ grep { length } split /\n/, ch_ok($sql) ];
}

sub parts_of
{
	my ($tbl) = @_;
	return ch_list("SELECT DISTINCT partition_id FROM system.parts WHERE database = '$db' AND table = '$tbl' AND active ORDER BY 1");
}

ch_control('POST', '/faults/clear');
fresh_fixture($db, $schema);

# The source: a row every 47 minutes over 09-01 .. 09-20, rows exactly on
# both bounds, duplicates, NULL window rows (never extracted).  The initial
# target: the source's rows outside the window, target-only kept rows
# (duplicated), NULL window rows, and stale rows inside the window that
# the refresh must remove.
psql_ok("CREATE TABLE $schema.src (id bigint NOT NULL, w timestamptz, v text, n numeric(12,2));
	INSERT INTO $schema.src
	SELECT g, timestamptz '2026-09-01 00:00:00+00' + g * interval '47 minutes',
		CASE WHEN g % 11 = 0 THEN NULL ELSE 'v' || g END, (g * 1.25)::numeric(12,2)
	  FROM generate_series(0, 580) g;
	INSERT INTO $schema.src VALUES
		(5001, '$lo', 'on lo', 1), (5002, '$hi', 'on hi', 2),
		(5003, timestamptz '$lo' - interval '1 microsecond', 'before lo', 3),
		(5004, timestamptz '$hi' - interval '1 microsecond', 'before hi', 4);
	INSERT INTO $schema.src SELECT * FROM $schema.src WHERE id % 7 = 0;
	INSERT INTO $schema.src SELECT 6000 + g, NULL, 'null window', NULL FROM generate_series(0, 9) g;
	CREATE TABLE $schema.init AS
	SELECT * FROM $schema.src WHERE $pg_keep
	UNION ALL
	SELECT 8000 + g, timestamptz '2026-09-02 03:00:00+00' + g * interval '5 hours', 'kept ' || g, g
	  FROM generate_series(0, 80) g
	UNION ALL
	SELECT 8000 + g, timestamptz '2026-09-02 03:00:00+00' + g * interval '5 hours', 'kept ' || g, g
	  FROM generate_series(0, 80, 3) g
	UNION ALL
	SELECT 9000 + g, timestamptz '$lo' + g * interval '2 hours', 'stale', NULL
	  FROM generate_series(0, 35) g
	UNION ALL
	SELECT 9500 + g, NULL, 'target null', g FROM generate_series(0, 5) g;
	CREATE TABLE $schema.expected AS
	SELECT * FROM $schema.init WHERE $pg_keep
	UNION ALL
	SELECT * FROM $schema.src WHERE $pg_in;");

my $expected = sorted_lines(psql_ok("SELECT $pg_row FROM $schema.expected"));
my $n_window = psql_ok("SELECT count(*) FROM $schema.src WHERE $pg_in");

my $cols = "(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String), n Nullable(Decimal(12, 2)))";

# Fill a target from $schema.init in three INSERTs (several parts per partition).
sub fill_target
{
	my ($tbl, $where) = @_;
	$where = $where ? "AND ($where)" : '';
	for my $k (0 .. 2)
	{
		my $tsv = psql_ok("SELECT id, COALESCE(to_char(w AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), E'\\\\N'),"
			  . " COALESCE(v, E'\\\\N'), COALESCE(n::text, E'\\\\N') FROM $schema.init WHERE id % 3 = $k $where",
			sep => "\t");
		ch_ok("INSERT INTO `$db`.`$tbl` FORMAT TabSeparated",
			data => "$tsv\n");
	}
}

sub target_rows
{
	my ($tbl) = @_;
	return sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl`"));
}

# The refresh's statements in the endpoint's query log.
sub refresh_logged
{
	my ($route) = @_;
	my $seq = ch_log_seq();
	my ($rc, $out, $err) = psql("SELECT state, invocation_id, details->'evidence'->'generation',"
		  . " details->'evidence'->>'target_rows' FROM dpwin_refresh('$route', '$hi')");
	my @log = ch_log_since($seq);
	my ($state, $inv, $parts, $rows) = split /\|/, $out;
	return ($state // "error: $err", $inv, $parts, \@log, $rows);
}

my $nroute = 0;

# The backups (old generations) in the test's database.
sub drop_backups
{
	ch_ok("DROP TABLE `$db`.`$_`")
	  for @{ ch_list("SELECT name FROM system.tables WHERE database = '$db' AND startsWith(name, '_dpwin_backup_')") };
}

# One target: create, fill, refresh, compare; check clone/copy decisions.
sub scenario
{
	my (%o) = @_;
	my $tbl = $o{table};
	my $route = "${tag}_" . ++$nroute;

	ch_ok("CREATE TABLE `$db`.`$tbl` $cols ENGINE = MergeTree $o{engine}");
	fill_target($tbl, $o{fill_where});
	$o{prepare}->() if $o{prepare};
	my $before = parts_of($tbl);
	$o{outside} //= sub { 0 };
	my @clone = grep { $o{clone}->($_) } @$before;
	my %clone = map { $_ => 1 } @clone;
	my @copy = grep { !$clone{$_} } @$before;

	psql_ok("SELECT dpwin.create_route('$route', '$schema.src', 'w', '$srv', '$db', '$tbl',
		interval '3 days', interval '1 day', parallelism => 2)");
	my ($state, $inv, $pj, $log, $final_rows) = refresh_logged($route);
	is($state, 'completed', "$o{label}: refresh completed");
	my $exp = $o{expected} // $expected;
	multiset_is(target_rows($tbl), $exp,
		"$o{label}: target = kept rows + source window, as multisets (" . scalar(@$exp) . " rows)");

	# (partition, source table) of every ATTACH PARTITION.
	my @attach = map { [ $_->{query} =~ /ATTACH PARTITION ID '([^']*)' FROM `\Q$db\E`\.`([^`]*)`/g ] }
	  grep { $_->{query} =~ /ATTACH PARTITION ID/ } @$log;
	my (@from_target, @from_staging);
	for my $a (@attach)
	{
		while (my ($p, $src) = splice(@$a, 0, 2))
		{
			push @from_target, $p if $src eq $tbl;
			push @from_staging, $p if $src =~ /_stg_/;
		}
	}
	is_deeply([ sort @from_target ], [ sort @clone ],
		"$o{label}: cloned exactly the " . scalar(@clone) . " partitions not wholly inside the window");
	ok(@from_staging >= 1, "$o{label}: staged rows were ATTACHed (" . scalar(@from_staging) . " partitions)");
	my @selects = grep { $_->{query} =~ /^INSERT INTO .* SELECT /s } @$log;
	is(scalar(@selects), 0, "$o{label}: no row went through an INSERT ... SELECT");
	# The cut partitions are rewritten without the window's rows by one
	# mutation where they hold at most a quarter of the target's rows (a day
	# or two of a 19-day table); where they hold more (a month or a week of
	# it, the one partition of an unpartitioned table) a lightweight DELETE
	# masks the window's rows.
	my @lightweight = grep { $_->{query} =~ /^DELETE FROM `\Q$db\E`\.`[^`]*_gen/ } @$log;
	my @mutations = grep { $_->{query} =~ /^ALTER TABLE `\Q$db\E`\.`[^`]*_gen_del` DELETE WHERE / } @$log;
	is(scalar(@lightweight) + scalar(@mutations), 1, "$o{label}: one DELETE removed the window from the clone");
	is(scalar(@mutations), $o{rewrite} ? 1 : 0,
		"$o{label}: " . ($o{rewrite} ? 'the cut partitions were rewritten by a mutation' : 'the cut partitions were not rewritten'));
	like($pj, $o{rewrite} ? qr/"rewritten": true/ : qr/"rewritten": false/, "$o{label}: evidence says whether they were");
	is(scalar(grep { $_->{query} =~ /APPLY DELETED MASK/ } @$log), 0, "$o{label}: no mask was applied afterwards");
	like($pj, qr/"dropped_partitions": ${\ scalar(@copy)}\b/,
		"$o{label}: evidence counts " . scalar(@copy) . " partitions wholly inside the window, not cloned");
	like($pj, $o{evidence}, "$o{label}: evidence says how partitions were judged") if $o{evidence};
	is($final_rows, scalar(@$exp), "$o{label}: evidence target_rows counts every row");

	# Partitions outside the window are the target's own files: same
	# checksums as the backup's.
	my @outside = grep { $o{outside}->($_) } @$before;
	if (@outside)
	{
		my $backup = psql_ok("SELECT backup_table FROM dpwin.publication WHERE invocation_id = '$inv'");
		my $in = join(', ', map { "'$_'" } @outside);
		my $sig = sub {
			my ($t) = @_;
			return ch_ok("SELECT groupArray((partition_id, rows, hash_of_all_files)) FROM (SELECT partition_id, rows, hash_of_all_files"
				  . " FROM system.parts WHERE database = '$db' AND table = '$t' AND active AND partition_id IN ($in) ORDER BY 1, 2, 3)");
		};
		is($sig->($tbl), $sig->($backup), "$o{label}: partitions outside the window have the old generation's parts, file for file");
	}

	# A second refresh of the refreshed target gives the same rows.  The
	# first left lightweight-deleted rows in the partitions that straddle a
	# window bound: the partitions are judged all the same, and those wholly
	# inside the window are again not cloned.
	my $pj2;
	($state, undef, $pj2) = refresh_logged($route);
	is($state, 'completed', "$o{label}: second refresh completed");
	multiset_is(target_rows($tbl), $exp, "$o{label}: ... and the same multiset");
	like($pj2, qr/"dropped_partitions": ${\ scalar(@copy)}\b/,
		"$o{label}: second refresh: " . scalar(@copy) . " partitions wholly inside the window, not cloned");
	if ($o{again_minmax})
	{
		# The cut partitions were rewritten without their deleted rows.
		like($pj2, qr/"minmax": true/, "$o{label}: second refresh: partitions judged from the minmax indexes again");
	}
	drop_backups();
	return $route;
}

my %window_day = map { $_ => 1 } qw(20260909 20260910 20260911 20260912);
my %inside_day = map { $_ => 1 } qw(20260910 20260911);

my $r_day = scenario(
	label => 'toYYYYMMDD(w), Nullable key',
	table => 'by_day',
	engine => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	clone => sub { !$inside_day{ $_[0] } },
	outside => sub { !$window_day{ $_[0] } },
	evidence => qr/"minmax": true/,
	rewrite => 1,
	again_minmax => 1);

scenario(
	label => 'ifNull(toYYYYMMDD(w), 0)',
	table => 'by_day_ifnull',
	engine => "PARTITION BY ifNull(toYYYYMMDD(w), 0) ORDER BY id",
	clone => sub { !$inside_day{ $_[0] } },
	outside => sub { !$window_day{ $_[0] } },
	rewrite => 1);

scenario(
	label => 'toYYYYMM(w), the window inside one month',
	table => 'by_month',
	engine => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	clone => sub { 1 },
	evidence => qr/"minmax": true/);

# Weeks start on Monday: 08-31 (values and the NULL rows), 09-07 (holds
# the window) and 09-14 (after it): all cloned, 09-14 untouched.
scenario(
	label => 'toMonday(ifNull(w, 08-31))',
	table => 'by_week',
	engine => "PARTITION BY toMonday(ifNull(w, toDateTime64('2026-08-31 00:00:00', 6, 'UTC'))) ORDER BY id",
	clone => sub { 1 },
	outside => sub { $_[0] eq '20260914' });

# Parts with lightweight deletes: the server does not answer min/max from
# their minmax indexes, so the window column is read; partitions are
# judged as well (those inside the window are not cloned), and the deleted
# rows stay deleted.
scenario(
	label => 'lightweight-deleted rows',
	table => 'by_day_deleted',
	engine => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	prepare => sub { ch_ok("DELETE FROM `$db`.`by_day_deleted` WHERE id >= 8000 AND id < 8010") },
	expected => sorted_lines(psql_ok("SELECT $pg_row FROM $schema.expected WHERE NOT (id >= 8000 AND id < 8010)")),
	clone => sub { !$inside_day{ $_[0] } },
	outside => sub { !$window_day{ $_[0] } },
	evidence => qr/"why_not": "the server cannot read the minmax index of /,
	rewrite => 1);

scenario(
	label => 'unpartitioned',
	table => 'flat',
	engine => "ORDER BY id",
	clone => sub { 1 },
	evidence => qr/^(?=.*"cloned_partitions": 1\b)(?=.*"why_not": "the target has no partition key")/s);

scenario(
	label => 'partition key without the window column',
	table => 'by_id',
	engine => "PARTITION BY intDiv(id, 2000) ORDER BY id",
	clone => sub { 1 },
	evidence => qr/"minmax": false/);

# --- changes of cloned partitions while the generation is built ------------

# The refresh in the background; returns a handle and the output refs.
sub refresh_async
{
	my ($route, $inv) = @_;
	my ($out, $err) = ('', '');
	my $args = "'$route', '$hi'" . ($inv ? ", '$inv'" : '');
	my $h = start [ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', '-c',
		"SELECT state, details->'evidence'->'generation' FROM dpwin_refresh($args)" ],
	  '>', \$out, '2>', \$err, timeout(120);
	return ($h, \$out, \$err);
}

my $tday = "`$db`.`by_day`";
my $uuid_sql = "SELECT toString(uuid) FROM system.tables WHERE database = '$db' AND name = 'by_day'";

# A cloned partition made of several parts, merged by OPTIMIZE while the
# clone's parts check is held on the server: parts differ, rows do not.
{
	ch_ok("INSERT INTO $tday VALUES (8800, '2026-09-03 01:00:00', 'merge me', 1)");
	ch_ok("INSERT INTO $tday VALUES (8801, '2026-09-03 02:00:00', 'merge me', 2)");
	my $exp = [ @$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id IN (8800, 8801)"))->@* ];
	cmp_ok(ch_ok("SELECT count() FROM system.parts WHERE database = '$db' AND table = 'by_day' AND active AND partition_id = '20260903'"),
		'>=', 2, 'merge: partition 20260903 has several parts');
	my $seq = ch_log_seq();
	fault(pattern => 'hash_of_all_files', count => 1, mode => 'hold');
	my ($h, $out, $err) = refresh_async($r_day);
	ok(wait_logged($seq, qr/ATTACH PARTITION ID '20260903'/), 'merge: partitions were cloned');
	ok(wait_running(qr/hash_of_all_files/, 1, phase => 'holding'), 'merge: the parts check waits on the server');
	ch_ok("OPTIMIZE TABLE $tday PARTITION ID '20260903' FINAL");
	is(release('hash_of_all_files'), 1, 'merge: the parts check is released after the merge');
	finish($h);
	like($$out, qr/^completed\|.*"digest_checks": [1-9]/,
		'merge: refresh completed, the merged partition was compared by digest') or diag($$err);
	multiset_is(target_rows('by_day'), $exp, 'merge: target = expected rows');
	$expected = $exp;
	drop_backups();
}

# A new kept row in a cloned partition while the target is being cloned
# (during extraction): the clone is found to differ from the target, so it
# is discarded and the target cloned again once the chunks are staged; the
# late row is kept, and published with the window.
{
	my $seq = ch_log_seq();
	fault(pattern => 'hash_of_all_files', count => 1, mode => 'hold');
	my ($h, $out, $err) = refresh_async($r_day);
	ok(wait_logged($seq, qr/ATTACH PARTITION ID '20260904'/), 'build: partitions were cloned');
	ok(wait_running(qr/hash_of_all_files/, 1, phase => 'holding'), 'build: the parts check waits on the server');
	ch_ok("INSERT INTO $tday VALUES (8900, '2026-09-04 01:00:00', 'late writer', 1)");
	is(release('hash_of_all_files'), 1, 'build: the parts check is released after the write');
	finish($h);
	like($$out, qr/^completed\|/, 'build: the refresh completes') or diag("out: $$out err: $$err");
	is(scalar(grep { $_->{query} =~ /^CREATE TABLE `\Q$db\E`\.`[^`]*_gen` AS/ } ch_log_since($seq)), 2,
		'build: the changed clone was discarded and the target cloned again');
	$expected = [ @$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id = 8900"))->@* ];
	multiset_is(target_rows('by_day'), $expected, 'build: target = previous rows + the late row, window refreshed');
	is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db' AND name LIKE '\\\\_dpwin\\\\_%' AND name NOT LIKE '%backup%'"), "0\n",
		'build: no staging or generation table is left');
	drop_backups();
}

# The same right before the exchange: the clone is checked and the window
# deleted from it; the attach of the staged parts is held back while a
# writer adds a kept row.
{
	my $uuid = ch_ok($uuid_sql);
	my $seq = ch_log_seq();
	# The first ATTACH to the generation clones the target, the second
	# attaches the staged parts: hold that one.
	my $inv = new_uuid();
	my $attach = "ALTER TABLE `$db`.`" . generation_name($r_day, $inv) . "` ATTACH";
	my $staged = "' FROM `$db`.`" . invocation_prefix(route_id($r_day), $inv) . 'stg_';
	fault(pattern => $staged, count => 1, mode => 'hold');
	my ($h, $out, $err) = refresh_async($r_day, $inv);
	ok(wait_logged($seq, qr/^ALTER TABLE `\Q$db\E`\.`[^`]*_gen_del` DELETE WHERE /), 'publish: the window was deleted from the clone');
	ok(wait_running(qr/^\Q$attach\E .*_stg_/s, 1, phase => 'holding'), 'publish: the attach of the staged parts waits on the server');
	ch_ok("INSERT INTO $tday VALUES (8901, '2026-09-05 01:00:00', 'later writer', 1)");
	is(release($staged), 1, 'publish: the attach is released after the write');
	finish($h);
	like($$err, qr/ERROR:\s+55000: target `\Q$db\E`\.`by_day` changed outside the window between generation build and publication/,
		'publish: refused with 55000') or diag("out: $$out err: $$err");
	is(ch_ok($uuid_sql), $uuid, 'publish: the target was not exchanged');
	$expected = [ @$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id = 8901"))->@* ];
	multiset_is(target_rows('by_day'), $expected, 'publish: target = previous rows + the late row');

	# Without interference the next refresh publishes, keeping both rows.
	is(psql_ok("SELECT state FROM dpwin_refresh('$r_day', '$hi')"), 'completed', 'a clean refresh completes');
	multiset_is(target_rows('by_day'), $expected, '... and keeps the late rows');
}

# --- merges and changes of the target's parts before the exchange ----------
#
# The target's parts are compared with those recorded at the clone right
# before the exchange.  Parts that are exactly merges of recorded ones
# (their blocks, rows and mutation, at a higher level) hold the same rows:
# no digest.  A mutation, or a merge that drops duplicates, changes the
# parts in the same partitions: compared by digest and refused.  Each case
# holds the attach of the staged parts, changes the target, releases it.
sub hold_staged_attach
{
	my ($label, $change) = @_;
	my $uuid = ch_ok($uuid_sql);
	my $inv = new_uuid();
	my $attach = "ALTER TABLE `$db`.`" . generation_name($r_day, $inv) . "` ATTACH";
	my $staged = "' FROM `$db`.`" . invocation_prefix(route_id($r_day), $inv) . 'stg_';
	fault(pattern => $staged, count => 1, mode => 'hold');
	my ($h, $out, $err) = refresh_async($r_day, $inv);
	ok(wait_running(qr/^\Q$attach\E .*_stg_/s, 1, phase => 'holding'), "$label: the attach of the staged parts waits on the server");
	$change->();
	is(release($staged), 1, "$label: the attach is released");
	finish($h);
	return ($uuid, $out, $err);
}

sub partition_parts
{
	my ($id) = @_;
	return ch_ok("SELECT count() FROM system.parts WHERE database = '$db' AND table = 'by_day' AND active AND partition_id = '$id'");
}

{
	ch_ok("INSERT INTO $tday VALUES (8970, '2026-08-20 01:00:00', 'merged kept', 1)");
	ch_ok("INSERT INTO $tday VALUES (8971, '2026-08-20 02:00:00', 'merged kept', 2)");
	is(partition_parts('20260820'), "2\n", 'merged: a kept partition of two parts');
	my $exp = [ @$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id IN (8970, 8971)"))->@* ];
	my ($uuid, $out, $err) = hold_staged_attach('merged', sub {
		ch_ok("OPTIMIZE TABLE $tday PARTITION ID '20260820' FINAL");
		is(partition_parts('20260820'), "1\n", 'merged: the partition was merged');
	});
	like($$out, qr/^completed\|.*"merged_partitions": [1-9]/, 'merged: published, the merged partition told by its parts')
	  or diag("out: $$out err: $$err");
	like($$out, qr/"digest_checks": 0\b/, 'merged: no digest');
	isnt(ch_ok($uuid_sql), $uuid, 'merged: the target was exchanged');
	multiset_is(target_rows('by_day'), $exp, 'merged: target = previous rows + the kept rows, window refreshed');
	$expected = $exp;
	drop_backups();
}

{
	ch_ok("INSERT INTO $tday VALUES (8972, '2026-08-21 01:00:00', 'to be updated', 1)");
	my ($uuid, $out, $err) = hold_staged_attach('mutated',
		sub { ch_ok("ALTER TABLE $tday UPDATE v = 'updated behind' WHERE id = 8972 SETTINGS mutations_sync = 2") });
	like($$err, qr/ERROR:\s+55000: target `\Q$db\E`\.`by_day` changed outside the window between generation build and publication/,
		'mutated: refused with 55000') or diag("out: $$out err: $$err");
	is(ch_ok($uuid_sql), $uuid, 'mutated: the target was not exchanged');
	$expected = [ sort(@$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id = 8972"))->@*) ];
	like(ch_ok("SELECT v FROM $tday WHERE id = 8972"), qr/^updated behind$/m, 'mutated: the update is kept');
	multiset_is(target_rows('by_day'), $expected, 'mutated: target = previous rows with the update');
}

{
	ch_ok("INSERT INTO $tday VALUES (8973, '2026-08-22 01:00:00', 'twice', 1)");
	ch_ok("INSERT INTO $tday VALUES (8973, '2026-08-22 01:00:00', 'twice', 1)");
	is(partition_parts('20260822'), "2\n", 'deduplicated: a kept partition of two parts, one row twice');
	my ($uuid, $out, $err) = hold_staged_attach('deduplicated', sub {
		ch_ok("OPTIMIZE TABLE $tday PARTITION ID '20260822' FINAL DEDUPLICATE");
		is(partition_parts('20260822'), "1\n", 'deduplicated: the partition was merged');
	});
	like($$err, qr/ERROR:\s+55000: target `\Q$db\E`\.`by_day` changed outside the window between generation build and publication/,
		'deduplicated: refused with 55000') or diag("out: $$out err: $$err");
	is(ch_ok($uuid_sql), $uuid, 'deduplicated: the target was not exchanged');
	$expected = [ sort(@$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id = 8973"))->@*) ];
	multiset_is(target_rows('by_day'), $expected, 'deduplicated: target = previous rows and the row once');
}

# --- changes of the generation itself before the exchange ------------------
#
# Partitions cloned whole are not counted again before the exchange: their
# parts must still be the target's, file for file, or they are counted on
# the window column like the rest.  While the attach of the staged parts is
# held, a row is added to, or lightweight-deleted from, such a partition of
# the generation (refused: the target is not exchanged), or the partition's
# parts are merged (same rows: published).
sub tamper_generation
{
	my ($label, $tamper, $ok) = @_;
	my $uuid = ch_ok($uuid_sql);
	my $inv = new_uuid();
	my $gen = "`$db`.`" . generation_name($r_day, $inv) . "`";
	my $attach = "ALTER TABLE $gen ATTACH";
	my $staged = "' FROM `$db`.`" . invocation_prefix(route_id($r_day), $inv) . 'stg_';
	fault(pattern => $staged, count => 1, mode => 'hold');
	my ($h, $out, $err) = refresh_async($r_day, $inv);
	ok(wait_running(qr/^\Q$attach\E .*_stg_/s, 1, phase => 'holding'), "$label: the attach of the staged parts waits on the server");
	$tamper->($gen);
	is(release($staged), 1, "$label: the attach is released");
	finish($h);
	if ($ok)
	{
		like($$out, qr/^completed\|/, "$label: the refresh completes") or diag("out: $$out err: $$err");
		isnt(ch_ok($uuid_sql), $uuid, "$label: the target was exchanged");
	}
	else
	{
		like($$err, qr/ERROR:\s+22000: generation `?\S*gen`? does not verify/,
			"$label: refused with 22000") or diag("out: $$out err: $$err");
		is(ch_ok($uuid_sql), $uuid, "$label: the target was not exchanged");
	}
	multiset_is(target_rows('by_day'), $expected, "$label: target = expected rows");
	drop_backups();
}

tamper_generation('extra row in a cloned partition',
	sub { ch_ok("INSERT INTO $_[0] VALUES (8950, '2026-09-03 03:00:00', 'tampered', 1)") }, 0);

my $victim = ch_ok("SELECT min(id) FROM $tday WHERE toYYYYMMDD(w) = 20260902") + 0;
tamper_generation('row deleted from a cloned partition',
	sub { ch_ok("DELETE FROM $_[0] WHERE id = $victim") }, 0);

ch_ok("INSERT INTO $tday VALUES (8960, '2026-09-02 01:00:00', 'two parts', 1)");
ch_ok("INSERT INTO $tday VALUES (8961, '2026-09-02 02:00:00', 'two parts', 2)");
$expected = [ @$expected, sorted_lines(ch_ok("SELECT $ch_row FROM $tday WHERE id IN (8960, 8961)"))->@* ];
cmp_ok(ch_ok("SELECT count() FROM system.parts WHERE database = '$db' AND table = 'by_day' AND active AND partition_id = '20260902'"),
	'>=', 3, 'merge in the generation: partition 20260902 has several parts');
tamper_generation('merge of a cloned partition in the generation',
	sub { ch_ok("OPTIMIZE TABLE $_[0] PARTITION ID '20260902' FINAL") }, 1);

ch_control('POST', '/faults/clear');
psql_ok("SELECT dpwin.drop_route(route_name) FROM dpwin.route WHERE route_name LIKE '${tag}%'");
drop_fixture();

done_testing();
