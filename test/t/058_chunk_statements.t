# The statements a chunk worker sends for one chunk, in sequence: the
# CREATE of its staging table, its INSERT and the digest; that every copy
# is the target as admitted is checked once, before their parts are
# attached (docs/benchmark.md).  A target changed between admission and
# the copy fails the refresh with the check's error, whether the rows load
# into the copy or not, and nothing of it is attached.  A chunk's digest
# runs on a connection of its own while the worker loads the next chunk.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault fresh_fixture drop_fixture create_event_source new_event_route new_uuid route_id
  invocation_prefix refresh_row_sql bg_psql bg_finish uuid_of);
use DpwinEndpoint qw(release wait_running wait_logged running);

my $db = "t058_$$";
my $E = '2026-09-09 00:00:00+00';

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
create_event_source();

# ---- the statements of each chunk --------------------------------------------

{
	my ($route) = new_event_route('count');
	my $inv = new_uuid();
	my $prefix = invocation_prefix(route_id($route), $inv);
	my $seq = ch_log_seq();
	like(psql_ok(refresh_row_sql($route, $E, $inv)), qr/\|completed\|/, 'the refresh completes');
	my @log = ch_log_since($seq);
	is(psql_ok("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$inv' AND attempt = 0 AND state = 'verified'"),
		4, 'four chunks, each verified at its first attempt');
	for my $c (0 .. 3)
	{
		my $stg = "${prefix}stg_${c}_0";
		# every statement naming the staging table, as an identifier or a
		# string, up to its digest
		my @mine;
		for my $l (@log)
		{
			next unless $l->{query} =~ /[`']\Q$stg\E[`']/;
			push @mine, $l->{query};
			last if $l->{query} =~ /^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed\(/;
		}
		my @kinds = map {
			/^DROP TABLE IF EXISTS / ? 'DROP'
			  : /^CREATE TABLE / ? 'CREATE'
			  : /^INSERT INTO / ? 'INSERT'
			  : /^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed\(/ ? 'DIGEST'
			  : 'OTHER'
		} @mine;
		is("@kinds", 'CREATE INSERT DIGEST', "chunk $c: CREATE, one INSERT, the digest: 3 statements");
		is(scalar(grep { /system\.(columns|tables)/ } @mine), 0,
			"chunk $c: none of them reads the catalog");
	}
	my $copies = qr/FROM system\.columns WHERE database = '\Q$db\E' AND `table` IN \('\Q${prefix}\Estg_/;
	my @checks = grep { $_->{query} =~ $copies } @log;
	is(scalar(@checks), 1, 'the copies are checked in one statement');
	is(scalar(() = ($checks[0]{query} // '') =~ /'\Q${prefix}\Estg_[0-3]_0'/g), 8,
		'... of all four (their rows of system.tables and system.columns)');
	my ($check_at) = grep { $log[$_]{query} =~ $copies } 0 .. $#log;
	my ($attach_at) = grep { $log[$_]{query} =~ /^ALTER TABLE .* ATTACH PARTITION .* FROM `\Q$db\E`\.`\Q${prefix}\Estg_/s } 0 .. $#log;
	ok(defined $check_at && defined $attach_at && $check_at < $attach_at, '... before their parts are attached');

	# The rest of the conversation: the server is asked for its version
	# once, however often the target is re-admitted, and the clean-up drops
	# every staging table in one statement.
	is(scalar(grep { $_->{query} =~ /^SELECT version\(\)/ } @log), 1, 'the server\'s version is read once per run');
	is(scalar(grep { $_->{query} =~ /system\.functions/ } @log), 0,
		'... and the functions a refresh needs are called, not looked up in system.functions');
	my @admissions = grep { $_->{query} =~ /^SELECT 'D', engine/ } @log;
	ok(@admissions >= 2, '... while the target is admitted again');
	is(scalar(grep { $_->{query} =~ /FROM system\.row_policies/ } @admissions), scalar(@admissions),
		'each admission reads the row policies in its own statement');
	is(scalar(grep { $_->{query} =~ /system\.row_policies/ && $_->{query} !~ /^SELECT 'D', engine/ } @log), 0,
		'... and no other statement reads them');
	my @drops = grep { $_->{query} =~ /^DROP TABLE IF EXISTS .*\Q${prefix}\Estg_/ } @log;
	is(scalar(@drops), 1, 'the clean-up drops the staging tables in one statement');
	is(scalar(() = ($drops[0]{query} // '') =~ /`\Q${prefix}\Estg_[0-3]_0`/g), 4, '... all four of them');
}

# ---- a server that lacks a function the refresh needs ----------------------------

# The first statement calls the functions a refresh needs; a server that
# does not know one answers UNKNOWN_FUNCTION (here injected), and only
# then is system.functions asked which ones it has.  This one has them
# all: the refresh goes on.
{
	my ($route) = new_event_route('functions');
	my $inv = new_uuid();
	fault(pattern => 'if(isNull(tuple(sipHash128ReferenceKeyed(', mode => 'error', code => 46, count => 1);
	my $seq = ch_log_seq();
	like(psql_ok(refresh_row_sql($route, $E, $inv)), qr/\|completed\|/, 'the refresh completes');
	my @first = grep { $_->{query} =~ /^SELECT version\(\)/ } ch_log_since($seq);
	is(scalar(@first), 2, 'the server\'s facts are asked twice');
	like($first[0]{query} // '', qr/isNull\(tuple\(sipHash128ReferenceKeyed\(.*sipHash64Keyed\(.*formatRow\(.*fromUnixTimestamp64Micro\(/,
		'... first by calling the functions');
	like($first[1]{query} // '', qr/FROM system\.functions WHERE name IN \('sipHash128ReferenceKeyed', 'sipHash64Keyed', 'formatRow', 'fromUnixTimestamp64Micro'\)/,
		'... then, as the call failed, from system.functions');
}

# ---- a chunk's digest runs while the worker loads the next chunk ----------------

# One worker, four chunks.  Hold the digest of chunk 0's staging table on
# the server: the worker loads chunk 1 meanwhile (its INSERT is answered
# while the digest is still held), and verifies chunk 0 once the digest is
# released.  Without the second connection the worker would wait for the
# digest before it created chunk 1's staging table.
{
	my ($route) = new_event_route('overlap');
	psql_ok("SELECT dpwin.alter_route('$route', parallelism => 1)");
	my $inv = new_uuid();
	my $prefix = invocation_prefix(route_id($route), $inv);
	my $digest0 = "FROM `$db`.`${prefix}stg_0_0`";
	fault(pattern => $digest0, mode => 'hold', count => 1);
	my $seq = ch_log_seq();
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_running(qr/^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed\(.*\Q$digest0\E/s, 1, phase => 'holding'),
		'the digest of chunk 0 waits on the server');
	ok(wait_logged($seq, qr/^INSERT INTO `\Q$db\E`\.`\Q${prefix}\Estg_1_0` /),
		'... while the worker loads chunk 1 into its staging table');
	is(scalar(grep { $_->{phase} eq 'holding' && $_->{query} =~ /\Q$digest0\E/ } running()), 1,
		'... the digest of chunk 0 still held');
	is(release($digest0), 1, 'the digest is released');
	my ($rc, $out, $err) = bg_finish($h);
	is($rc, 0, 'the refresh completes') or diag($err);
	is(psql_ok("SELECT string_agg(chunk_no || ':' || attempt || ':' || state, ' ' ORDER BY chunk_no)"
		  . " FROM dpwin.chunks WHERE invocation_id = '$inv'"),
		'0:0:verified 1:0:verified 2:0:verified 3:0:verified', 'every chunk verified at its first attempt');
	is(psql_ok("SELECT count(*) FROM dpwin.chunks c JOIN dpwin.chunks n ON n.invocation_id = c.invocation_id"
		  . " AND n.chunk_no = c.chunk_no + 1 WHERE c.invocation_id = '$inv' AND c.finished_at > n.started_at"),
		3, "each chunk's receipt was journaled after the next chunk's attempt began");
}

# ---- the window's facts come with the chunks' digests -------------------------

# Each staging digest also reads the window's facts among its chunk's
# rows.  The generation is counted once, before the attach, while the
# workers read the source; after the attach its parts are those it had
# then and the staged ones, file for file, so no statement reads it again
# before the EXCHANGE: its counts are added up from the parts, and the
# evidence's days are the chunks'.  A merge of the generation in between
# changes its parts: the facts are then read from it, as before.
sub facts_days
{
	my ($t) = @_;
	my $days = ch_ok("SELECT concat(toJSONString(groupArray(n)), ' ', toString(sum(n))) FROM (SELECT toDate(w) d, count() n"
		  . " FROM `$db`.`$t` WHERE w >= '2026-09-08 00:00:00' AND w < '2026-09-09 00:00:00' GROUP BY d ORDER BY d)");
	chomp $days;
	return $days;
}

sub facts_evidence
{
	my ($inv) = @_;
	return psql_ok("SELECT (result->'evidence'->'generation'->>'counted_by_parts') || ' '"
		  . " || (result->'evidence'->'utc_days'->>'rows') || ' ' || (result->'evidence'->'window_bounds'->>'window_rows')"
		  . " FROM dpwin.invocation WHERE invocation_id = '$inv'");
}

{
	my ($route, $t) = new_event_route('facts');
	my $inv = new_uuid();
	my $prefix = invocation_prefix(route_id($route), $inv);
	my $gen = "${prefix}gen";
	my $seq = ch_log_seq();
	like(psql_ok(refresh_row_sql($route, $E, $inv)), qr/\|completed\|/, 'facts: the refresh completes');
	my @log = ch_log_since($seq);
	my $chunks = psql_ok("SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '$inv' AND state = 'verified'");
	ok($chunks > 1, "facts: $chunks chunks");
	is(scalar(grep { $_->{query} =~ /^SELECT count\(\), sum\(.*, countIf\(.*minOrNullIf\(.* FROM `\Q$db\E`\.`\Q${prefix}\Estg_/s } @log),
		$chunks, 'facts: each chunk\'s digest reads the window\'s facts among its rows');
	my ($attach) = grep { $log[$_]{query} =~ /^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*stg_/s } 0 .. $#log;
	my @counted = grep { $log[$_]{query} =~ /FROM `\Q$db\E`\.`\Q$gen\E` PREWHERE isNull\(`w`\)/ } 0 .. $#log;
	is(scalar(@counted), 1, 'facts: the generation is counted once');
	ok(defined $attach && $counted[0] < $attach, '... before the staged parts are attached');
	my @after = grep { $_->{query} =~ /FROM `\Q$db\E`\.`\Q$gen\E`/ } @log[ $attach + 1 .. $#log ];
	is(scalar(@after), 0, '... and no statement reads it after the attach') or diag(join("\n", map { $_->{query} } @after));
	is(facts_evidence($inv), 'true ' . facts_days($t),
		'facts: its counts are added up from its parts, and the evidence counts the rows the target holds in the window, day by day');
}

# Chunks of 10 hours in a window from 03:00 to 03:00: a UTC day in two
# chunks, a chunk across midnight.  The days, their rows and the bounds
# are the target's, counted here on its own.
{
	my ($route, $t) = new_event_route('facts_days');
	psql_ok("SELECT dpwin.alter_route('$route', chunk_interval => interval '10 hours')");
	my $inv = new_uuid();
	like(psql_ok(refresh_row_sql($route, '2026-09-09 03:00:00+00', $inv)), qr/\|completed\|/, 'days: the refresh completes');
	my $in = "w >= '2026-09-08 03:00:00' AND w < '2026-09-09 03:00:00'";
	my $days = ch_ok("SELECT concat(toJSONString(groupArray(toString(d))), ' ', toJSONString(groupArray(n))) FROM"
		  . " (SELECT toDate(w) d, count() n FROM `$db`.`$t` WHERE $in GROUP BY d ORDER BY d)");
	chomp $days;
	like($days, qr/^\["2026-09-08","2026-09-09"\] /, 'days: the window holds rows of two days');
	(my $evidence = psql_ok("SELECT (result->'evidence'->'generation'->>'counted_by_parts') || ' ' || (result->'evidence'->'utc_days'->>'days')"
		  . " || ' ' || (result->'evidence'->'utc_days'->>'rows') FROM dpwin.invocation WHERE invocation_id = '$inv'")) =~ s/, /,/g;
	is($evidence, "true $days", 'days: the evidence counts the rows of each day, added up from the chunks');
	my $bounds = ch_ok("SELECT concat(toString(min(w)), '|', toString(max(w)), '|', toString(count())) FROM `$db`.`$t` WHERE $in");
	chomp $bounds;
	is(psql_ok("SELECT concat_ws('|', b->>'min', b->>'max', b->>'window_rows') FROM"
		  . " (SELECT result->'evidence'->'window_bounds' b FROM dpwin.invocation WHERE invocation_id = '$inv') e"),
		$bounds, '... and its bounds and rows');
}

# A one-worker refresh of a new route, started and held at its
# re-admission after the rows: chunk 0's digest is held first, so that
# the holds set then (the re-admission's, and those `holds` make of the
# generation's name) cannot catch an earlier statement.  Returns the route, target, invocation, table
# prefix, generation, log position and the psql handle.
my $readmit = "SELECT 'D', engine";

sub held_at_readmission
{
	my ($tag, @holds) = @_;
	my ($route, $t) = new_event_route($tag);
	psql_ok("SELECT dpwin.alter_route('$route', parallelism => 1)");
	my $inv = new_uuid();
	my $prefix = invocation_prefix(route_id($route), $inv);
	my $digest0 = "FROM `$db`.`${prefix}stg_0_0`";
	fault(pattern => $digest0, mode => 'hold', count => 1);
	my $seq = ch_log_seq();
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_running(qr/^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed\(.*\Q$digest0\E/s, 1, phase => 'holding'),
		"$tag: the digest of chunk 0 waits on the server");
	fault(pattern => $_, mode => 'hold', count => 1) for ($readmit, map { $_->("${prefix}gen") } @holds);
	is(release($digest0), 1, "$tag: the digest is released");
	ok(wait_running(qr/^\Q$readmit\E/, 1, phase => 'holding'), "$tag: the re-admission waits on the server");
	return ($route, $t, $inv, $prefix, "${prefix}gen", $seq, $h);
}

{
	my ($route, $t, $inv, $prefix, $gen, $seq, $h) = held_at_readmission('merged');
	my $names = "SELECT arrayStringConcat(arraySort(groupArray(name)), ',') FROM system.parts"
	  . " WHERE database = '$db' AND `table` = '$gen' AND active";
	my $before = ch_ok($names);
	ch_ok("OPTIMIZE TABLE `$db`.`$gen` FINAL");
	isnt(ch_ok($names), $before, 'merged: a merge changed the generation\'s parts');
	is(release($readmit), 1, 'merged: the re-admission is released');
	my ($rc, $out, $err) = bg_finish($h);
	is($rc, 0, 'merged: the refresh completes') or diag($err);
	my @log = ch_log_since($seq);
	my @read = grep { $_->{query} =~ /^SELECT toJSONString\(.*FROM `\Q$db\E`\.`\Q$gen\E`/s } @log;
	is(scalar(@read), 1, 'merged: the facts are read from the generation');
	like($read[0]{query_id} // '', qr/^dpwin-\Q$inv\E-2-/, '... on the coordinator\'s second connection');
	like($read[0]{query} // '', qr/, _dpwin_in, \(SELECT count\(\) FROM `\Q$db\E`\.`\Q$gen\E`\)/,
		'... with the generation\'s rows, inside the ranges and in all');
	is(facts_evidence($inv), 'false ' . facts_days($t),
		'merged: its counts are read, and the evidence counts the rows the target holds in the window, day by day');
}

# ---- after the rows: what runs beside what, and what is read once ------------

# One worker, four chunks.  While chunk 0's digest is held, nothing after
# the rows can have started; a hold on the re-admission is set then.  The
# staged parts are listed on the second connection while it is held.  Then
# hold the RENAME to the backup: the invocation's tables, listed on the
# second connection before the EXCHANGE, are dropped on it meanwhile, all
# but the generation's name, which the RENAME moves.  The generation's UUID comes with its
# description when it is created, and the target's parts with the
# generation's after the attach: neither has a statement of its own.
{
	my $rename_of = sub { "RENAME TABLE `$db`.`$_[0]`" };
	my ($route, $t, $inv, $prefix, $gen, $seq, $h) = held_at_readmission('beside', $rename_of);
	my $rename = $rename_of->($gen);
	my $staged = qr/FROM system\.parts WHERE .*'\Q${prefix}\Estg_0_0'/s;
	my $drop = qr/^DROP TABLE IF EXISTS `\Q$db\E`\.`\Q${prefix}\Estg_0_0`/;
	ok(wait_logged($seq, $staged), '... while the staged parts are listed');
	my ($listed) = grep { $_->{query} =~ $staged } ch_log_since($seq);
	like($listed->{query_id} // '', qr/^dpwin-\Q$inv\E-2-/, '... on the coordinator\'s second connection');
	is(scalar(grep { $_->{query} =~ /^ALTER TABLE .* ATTACH PARTITION .* FROM `\Q$db\E`\.`\Q${prefix}\Estg_/s } ch_log_since($seq)), 0,
		'... and no staged part is attached before the target is admitted again');
	is(release($readmit), 1, 'beside: the re-admission is released');
	ok(wait_running(qr/^\Q$rename\E/, 1, phase => 'holding'), 'beside: the RENAME to the backup waits on the server');
	ok(wait_logged($seq, $drop), '... while the staging tables are dropped');
	my ($dropped) = grep { $_->{query} =~ $drop } ch_log_since($seq);
	like($dropped->{query_id} // '', qr/^dpwin-\Q$inv\E-2-/, '... on the second connection');
	is($dropped->{status}, '200', '... and the DROP ran');
	is(release($rename), 1, 'beside: the RENAME is released');
	my ($rc, $out, $err) = bg_finish($h);
	is($rc, 0, 'beside: the refresh completes') or diag($err);
	my @log = ch_log_since($seq);
	is(scalar(grep { $_->{query} =~ /^DROP TABLE IF EXISTS .*\Q${prefix}\Estg_/ } @log), 1,
		'beside: the staging tables are dropped once');
	my @lists = grep { $_->{query} =~ /^SELECT name FROM system\.tables .*startsWith\(name, '\Q$prefix\E'\)/ } @log;
	is(scalar(@lists), 1, 'beside: the invocation\'s tables are listed once');
	like($lists[0]{query_id} // '', qr/^dpwin-\Q$inv\E-2-/, '... on the second connection');
	my ($renamed) = grep { $_->{query} =~ /^\Q$rename\E/ } @log;
	ok(($lists[0]{seq} // 1e9) < ($renamed->{seq} // 0), '... answered before the RENAME, which waited');
	is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db' AND startsWith(name, '$prefix')") + 0, 0,
		'... and no table of the invocation is left');

	my ($attach) = grep { $log[$_]{query} =~ /^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*stg_/s } 0 .. $#log;
	my @parts = grep { $_->{query} =~ /FROM system\.parts WHERE/ } @log[ $attach + 1 .. $#log ];
	is(scalar(@parts), 1, 'beside: after the attach, the parts are read in one statement');
	like($parts[0]{query} // '', qr/`table` IN \('\Q$gen\E', '\Q$t\E'\)/, '... of the generation and the target');
	is(scalar(grep { $_->{query} =~ /^SELECT toString\(uuid\) FROM system\.tables WHERE .*'\Q$gen\E'/ } @log), 0,
		'beside: the generation\'s UUID is not read on its own');
	is(psql_ok("SELECT generation_uuid FROM dpwin.publication WHERE invocation_id = '$inv'"), uuid_of($t),
		'... and the intent names the UUID the published target has');
}

# ---- a target changed between admission and the copy --------------------------

# Hold the CREATE of chunk 0's staging table, change the target, release:
# the copy has the changed structure.
# - added: a column added (the rows still load and verify; admission,
#   asked again before the build, refuses the target's new column);
# - dropped: a column dropped (the INSERT fails, and the check of the
#   copy, run then, fails the attempt and names the cause);
# - restored: a column added, then dropped again while chunk 1's CREATE
#   is held, so that the target is again what admission saw and only
#   chunk 0's copy differs: the check of the copies, after that
#   admission and before anything is attached, fails the refresh.
for my $case (
	[ 'added', 'ADD COLUMN extra Nullable(String)' ],
	[ 'dropped', 'DROP COLUMN v' ],
	[ 'restored', 'ADD COLUMN extra Nullable(String)', 'DROP COLUMN extra' ])
{
	my ($what, $alter, $undo) = @$case;
	my ($route, $t) = new_event_route("chg_$what");
	psql_ok("SELECT dpwin.alter_route('$route', parallelism => 1)");
	my $inv = new_uuid();
	my $stg = invocation_prefix(route_id($route), $inv) . 'stg_0_0';
	my $stg1 = invocation_prefix(route_id($route), $inv) . 'stg_1_0';
	my $before = ch_ok("SELECT count() FROM `$db`.`$t`");
	fault(pattern => "CREATE TABLE `$db`.`$stg`", mode => 'hold', count => 1);
	fault(pattern => "CREATE TABLE `$db`.`$stg1`", mode => 'hold', count => 1) if $undo;
	my $seq = ch_log_seq();
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_running(qr/^CREATE TABLE `\Q$db\E`\.`\Q$stg\E`/, 1, phase => 'holding'),
		"column $what: the staging CREATE waits on the server");
	ch_ok("ALTER TABLE `$db`.`$t` $alter");
	is(release("CREATE TABLE `$db`.`$stg`"), 1, "column $what: released after the target changed");
	if ($undo)
	{
		ok(wait_running(qr/^CREATE TABLE `\Q$db\E`\.`\Q$stg1\E`/, 1, phase => 'holding'),
			"column $what: chunk 1's CREATE waits on the server");
		ch_ok("ALTER TABLE `$db`.`$t` $undo");
		is(release("CREATE TABLE `$db`.`$stg1`"), 1, "column $what: released after the target changed back");
	}
	my ($rc, undef, $err) = bg_finish($h);
	isnt($rc, 0, "column $what: the refresh fails");
	if ($what eq 'added')
	{
		like($err, qr/ERROR:\s+42804: ClickHouse target `\Q$db\E`\.`\Q$t\E` has 4 columns/,
			"column $what: admission, asked again, refuses the target's new column") or diag($err);
	}
	else
	{
		like($err, qr/ERROR:\s+55000: ClickHouse target `\Q$db\E`\.`\Q$t\E` changed since it was admitted/,
			"column $what: with the check's SQLSTATE and message") or diag($err);
		like($err, qr/DETAIL:\s+Its copy `\Q$db\E`\.`\Q$stg\E` has a different engine definition or columns\./,
			"column $what: naming the copy");
	}

	# rows that loaded are the source's (the digest covers the admitted
	# columns); the copy is refused before its parts are used
	is(psql_ok("SELECT attempt || ' ' || state FROM dpwin.chunks WHERE invocation_id = '$inv' AND chunk_no = 0"),
		$what eq 'dropped' ? '0 failed' : '0 verified',
		"column $what: chunk 0 " . ($what eq 'dropped' ? 'failed at its first attempt, not retried' : 'verified'));
	my @log = ch_log_since($seq);
	my @ins = grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$stg\E` / } @log;
	is(join(',', map { $_->{status} eq '200' ? 'ok' : 'failed' } @ins), $what eq 'dropped' ? 'failed' : 'ok',
		"column $what: its INSERT " . ($what eq 'dropped' ? 'failed' : 'loaded the rows'));
	is(scalar(grep { $_->{query} =~ /^ALTER TABLE .* ATTACH PARTITION .* FROM `\Q$db\E`\.`[^`]*stg_/s } @log), 0,
		"column $what: no staged part is attached");
	is(ch_ok("SELECT count() FROM `$db`.`$t`"), $before, "column $what: the target keeps its rows");
}

drop_fixture();
done_testing();
