# Target admission (src/admission.c, docs/admission.md) against the real engine:
# for each blocker, a real ClickHouse table that has it, and the SQLSTATE
# and message dpwin_test.admit_target() raises; an admissible target and what
# admission learns about it; identifiers that need quoting; the EXCHANGE
# probe; and the rows a refresh keeps at sub-precision window bounds.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(pg_literal pg_ident ch_literal ch_ident fault bg_psql bg_finish);
use DpwinEndpoint qw(wait_running release);

my $url = $ENV{DPWIN_CH_URL};
my $user = $ENV{DPWIN_CH_USER};
my $password = $ENV{DPWIN_CH_PASSWORD};

my $db = "t040_$$";
my $memdb = "t040m_$$";
my $odddb = "t040 D'b`ü;$$";
my $srv = 't040_ch';
my $schema = 't040';

sub qn { my ($d, $t) = @_; return ch_ident($d) . '.' . ch_ident($t); }

# Create db.table with the given definition (replacing any earlier one).
sub ch_table
{
	my ($d, $t, $def) = @_;
	ch_ok("DROP TABLE IF EXISTS " . qn($d, $t) . "");
	ch_ok("CREATE TABLE " . qn($d, $t) . " $def");
}

my $nroutes = 0;

# A route from source $src (columns as given) to $d.$t; returns its name.
sub route
{
	my ($d, $t, %opt) = @_;
	my $name = sprintf('t040_r%d', ++$nroutes);
	my $src = $opt{source} // "$schema.src";
	my $cols = $opt{columns} ? ", columns => ARRAY[" . join(', ', map { pg_literal($_) } @{ $opt{columns} }) . "]::name[]" : '';
	psql_ok("SELECT dpwin.create_route(" . pg_literal($name) . ", "
		  . pg_literal($src) . "::regclass, 'w', " . pg_literal($srv) . ", "
		  . pg_literal($d) . ", " . pg_literal($t)
		  . ", interval '1 day', interval '1 hour'$cols)");
	return $name;
}

sub admit_sql { my ($r) = @_; return "SELECT dpwin_test.admit_target(" . pg_literal($r) . ")"; }

sub admit_json_field
{
	my ($r, $field) = @_;
	return psql_ok("SELECT dpwin_test.admit_target(" . pg_literal($r) . ") ->> " . pg_literal($field));
}

# Expect admission of a target defined by $def to fail with $state/$re.
sub refused
{
	my ($label, $d, $t, $def, $state, $re, %opt) = @_;
	ch_table($d, $t, $def) if defined $def;
	my $r = route($d, $t, %opt);
	my $err = psql_err(admit_sql($r)) // 'admitted';
	like($err, qr/^\Q$state\E: (?:.*?)$re/, $label) or diag("got: $err");
	return $r;
}

# --- setup ---------------------------------------------------------------

ch_ok("DROP DATABASE IF EXISTS " . ch_ident($_) . "") for ($db, $memdb, $odddb);
ch_ok("CREATE DATABASE " . ch_ident($db) . " ENGINE = Atomic");
ch_ok("CREATE DATABASE " . ch_ident($memdb) . " ENGINE = Memory");
ch_ok("CREATE DATABASE " . ch_ident($odddb) . " ENGINE = Atomic");

psql_ok("DROP SCHEMA IF EXISTS $schema CASCADE;
	SELECT dpwin.drop_route(route_name) FROM dpwin.route WHERE route_name LIKE 't040\\_%';
	DROP SERVER IF EXISTS $srv CASCADE;
	CREATE SERVER $srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url " . pg_literal($url) . ");
	CREATE USER MAPPING FOR CURRENT_USER SERVER $srv
		OPTIONS (user " . pg_literal($user) . ", password " . pg_literal($password) . ");
	CREATE SCHEMA $schema;
	CREATE TABLE $schema.src (id bigint NOT NULL, w timestamptz, v text);
	CREATE TABLE $schema.src_nn (id bigint NOT NULL, w timestamptz NOT NULL, v text);
	CREATE TABLE $schema.src_arr (id bigint NOT NULL, w timestamptz, a integer[]);
	CREATE TABLE $schema.src_ttl (\"TTL\" bigint NOT NULL, w timestamptz, ttl integer);");

my $good = "(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = MergeTree PARTITION BY intDiv(id, 1000) ORDER BY id";

# --- an admissible target --------------------------------------------------

{
	ch_table($db, 'ok', $good);
	my $r = route($db, 'ok');
	my ($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, 'a plain MergeTree target with matching columns is admitted') or diag($err);

	my $uuid = ch_ok("SELECT toString(uuid) FROM system.tables WHERE database = " . ch_literal($db) . " AND name = 'ok'");
	chomp $uuid;
	is(admit_json_field($r, 'uuid'), $uuid, 'info: uuid is system.tables.uuid');
	is(admit_json_field($r, 'database'), $db, 'info: database');
	is(admit_json_field($r, 'table'), 'ok', 'info: table');
	is(psql_ok("SELECT dpwin_test.admit_target(" . pg_literal($r) . ") -> 'columns'"),
		'["id", "w", "v"]', 'info: columns in target order');
	is(psql_ok("SELECT dpwin_test.admit_target(" . pg_literal($r) . ") -> 'types'"),
		q{["Int64", "Nullable(DateTime64(6, 'UTC'))", "Nullable(String)"]}, 'info: types as system.columns prints them');
	is(admit_json_field($r, 'window_precision'), '6', 'info: window precision');
	is(admit_json_field($r, 'window_nullable'), 'true', 'info: window nullable');
	is(admit_json_field($r, 'partition_key'), 'intDiv(id, 1000)', 'info: partition key');
	is(admit_json_field($r, 'sorting_key'), 'id', 'info: sorting key');
	like(admit_json_field($r, 'engine_full'), qr/^MergeTree PARTITION BY intDiv\(id, 1000\) ORDER BY id/, 'info: engine_full');
	is(admit_json_field($r, 'quoted_columns'), '`id`, `w`, `v`', 'info: quoted column list');
	my $fp = admit_json_field($r, 'schema_fingerprint');
	like($fp, qr/^[0-9a-f]{64}$/, 'info: schema fingerprint is SHA-256 hex');

	# A CREATE TABLE AS copy has the same fingerprint: it does not depend on the name.
	ch_ok("DROP TABLE IF EXISTS " . qn($db, 'ok_copy') . "");
	ch_ok("CREATE TABLE " . qn($db, 'ok_copy') . " AS " . qn($db, 'ok'));
	my $r2 = route($db, 'ok_copy');
	is(admit_json_field($r2, 'schema_fingerprint'), $fp, 'a CREATE TABLE AS copy has the same fingerprint');
	isnt(admit_json_field($r2, 'uuid'), $uuid, '... and its own uuid');

	# A change that leaves columns and engine_full alone (a skipping index)
	# still changes the fingerprint.
	ch_ok("ALTER TABLE " . qn($db, 'ok_copy') . " ADD INDEX ix_v v TYPE bloom_filter GRANULARITY 4");
	isnt(admit_json_field($r2, 'schema_fingerprint'), $fp, 'an added skipping index changes the fingerprint');

	# Lower precision and a NOT NULL window.
	ch_table($db, 'ok_p3', "(id Int64, w DateTime64(3, 'UTC'), v Nullable(String)) ENGINE = MergeTree ORDER BY id");
	my $r3 = route($db, 'ok_p3', source => "$schema.src_nn");
	is(admit_json_field($r3, 'window_precision'), '3', 'DateTime64(3, \'UTC\') window is admitted, precision 3');
	is(admit_json_field($r3, 'window_nullable'), 'false', '... not nullable');

	# Admission writes nothing.
	is(ch_ok("SELECT count() FROM system.tables WHERE database = " . ch_literal($db) . " AND name LIKE '\\\\_dpwin%'"),
		"0\n", 'admission created no tables');
}

# --- server and database ---------------------------------------------------

refused('missing database', "t040_nodb_$$", 'x', undef, '42P01',
	qr/ClickHouse database `t040_nodb_\d+` of target `t040_nodb_\d+`\.`x` does not exist/);
refused('missing table', $db, 'nope', undef, '42P01',
	qr/ClickHouse target `\Q$db\E`\.`nope` does not exist/);
refused('database not Atomic (Memory)', $memdb, 'tm', $good, '0A000',
	qr/ClickHouse database `\Q$memdb\E` of target `\Q$memdb\E`\.`tm` has engine Memory, not Atomic/);

# --- table engine ------------------------------------------------------------

refused('ReplacingMergeTree', $db, 'rmt',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = ReplacingMergeTree ORDER BY id",
	'0A000', qr/ClickHouse target `\Q$db\E`\.`rmt` has engine ReplacingMergeTree; dpwin refreshes only plain MergeTree tables/);
refused('SummingMergeTree', $db, 'smt',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = SummingMergeTree ORDER BY id",
	'0A000', qr/has engine SummingMergeTree/);
refused('Memory table', $db, 'mem',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = Memory",
	'0A000', qr/has engine Memory;/);
{
	ch_ok("DROP VIEW IF EXISTS " . qn($db, 'vw'));
	ch_ok("CREATE VIEW " . qn($db, 'vw') . " AS SELECT * FROM " . qn($db, 'ok'));
	refused('a view', $db, 'vw', undef, '0A000', qr/has engine View;/);
}

# --- topology blockers -----------------------------------------------------------

refused('table TTL', $db, 'ttl_t',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id TTL toDateTime(assumeNotNull(w)) + INTERVAL 1 YEAR",
	'55000', qr/ClickHouse target `\Q$db\E`\.`ttl_t` has a table TTL/);
refused('column TTL', $db, 'ttl_c',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String) TTL toDateTime(assumeNotNull(w)) + INTERVAL 1 YEAR) ENGINE = MergeTree ORDER BY id",
	'55000', qr/ClickHouse target `\Q$db\E`\.`ttl_c` has a column TTL/);
{
	# Columns named TTL and ttl, used in keys and settings that contain "ttl",
	# are not a TTL.
	ch_table($db, 'ttl_names', "(`TTL` Int64, w Nullable(DateTime64(6, 'UTC')), ttl Nullable(Int32)) ENGINE = MergeTree PARTITION BY TTL % 4 ORDER BY (TTL, `TTL` * 2) SETTINGS merge_with_ttl_timeout = 3600");
	my $r = route($db, 'ttl_names', source => "$schema.src_ttl");
	my ($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, 'columns named TTL and ttl used in keys are not a TTL') or diag($err);

	# ... while a real TTL over such a column is found.
	refused('table TTL over a column named TTL', $db, 'ttl_names2',
		"(`TTL` Int64, w Nullable(DateTime64(6, 'UTC')), ttl Nullable(Int32)) ENGINE = MergeTree ORDER BY TTL TTL toDateTime(assumeNotNull(w)) + toIntervalDay(TTL)",
		'55000', qr/has a table TTL/, source => "$schema.src_ttl");
}

refused('projection', $db, 'proj',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String), PROJECTION p_by_v (SELECT id, v ORDER BY v)) ENGINE = MergeTree ORDER BY id",
	'55000', qr/ClickHouse target `\Q$db\E`\.`proj` has projections/);
{
	my (undef, undef, $err) = psql(admit_sql("t040_r$nroutes"));
	like($err, qr/Projections: `p_by_v`/, '... the detail names the projection');
}

{
	ch_table($db, 'mv_src', $good);
	ch_ok("DROP TABLE IF EXISTS " . qn($db, 'mv_r') . "");
	ch_ok("CREATE MATERIALIZED VIEW " . qn($db, 'mv_r') . " ENGINE = MergeTree ORDER BY id AS SELECT id FROM " . qn($db, 'mv_src'));
	refused('materialized view reading from the target', $db, 'mv_src', undef, '55000',
		qr/ClickHouse target `\Q$db\E`\.`mv_src` has dependent materialized views/);
	my (undef, undef, $err) = psql(admit_sql("t040_r$nroutes"));
	like($err, qr/reading from it: `\Q$db\E`\.`mv_r`/, '... the detail names the view');

	ch_table($db, 'mv_dst', $good);
	ch_table($db, 'feed', $good);
	ch_ok("DROP TABLE IF EXISTS " . qn($db, 'mv_w') . "");
	ch_ok("CREATE MATERIALIZED VIEW " . qn($db, 'mv_w') . " TO " . qn($db, 'mv_dst') . " AS SELECT * FROM " . qn($db, 'feed'));
	refused('materialized view writing into the target', $db, 'mv_dst', undef, '55000',
		qr/has dependent materialized views/);
	(undef, undef, $err) = psql(admit_sql("t040_r$nroutes"));
	like($err, qr/writing into it: `\Q$db\E`\.`mv_w`/, '... the detail names the view');
}

refused('DEFAULT column', $db, 'def',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String) DEFAULT 'x') ENGINE = MergeTree ORDER BY id",
	'55000', qr/ClickHouse target `\Q$db\E`\.`def` has DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL columns/);
refused('MATERIALIZED column', $db, 'mat',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String), m Int64 MATERIALIZED id * 2) ENGINE = MergeTree ORDER BY id",
	'55000', qr/has DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL columns/);
refused('ALIAS column', $db, 'ali',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String), a Int64 ALIAS id + 1) ENGINE = MergeTree ORDER BY id",
	'55000', qr/has DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL columns/);
refused('EPHEMERAL column', $db, 'eph',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String), e Int64 EPHEMERAL) ENGINE = MergeTree ORDER BY id",
	'55000', qr/has DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL columns/);

# An unfinished mutation: stop merges on the table so that it stays pending.
{
	ch_table($db, 'mut', $good);
	ch_ok("INSERT INTO " . qn($db, 'mut') . " VALUES (1, now64(6), 'a')");
	ch_ok("SYSTEM STOP MERGES " . qn($db, 'mut'));
	ch_ok("ALTER TABLE " . qn($db, 'mut') . " UPDATE v = 'b' WHERE 1 SETTINGS mutations_sync = 0");
	my $pending = ch_ok("SELECT count() FROM system.mutations WHERE database = " . ch_literal($db) . " AND `table` = 'mut' AND is_done = 0");
	like($pending, qr/^[1-9]/, 'the mutation stays unfinished while merges are stopped');
	refused('unfinished mutation', $db, 'mut', undef, '55000',
		qr/ClickHouse target `\Q$db\E`\.`mut` has unfinished mutations/);
	ch_ok("KILL MUTATION WHERE database = " . ch_literal($db) . " AND `table` = 'mut'");
	ch_ok("SYSTEM START MERGES " . qn($db, 'mut'));
}

# A row policy, defined the way a server defines one: in the users
# configuration.  The sandbox boots the endpoint with ch_users.xml
# (test/sandbox.sh), which hides the rows of dpwin_policy.policed with
# id <= 0 from the engine's user; the names are fixed by that file.  That
# user may not read system.row_policies, so admission finds the policy
# through its fallback: the plan of a read from the target has a row-level
# filter (docs/admission.md).
{
	my $pdb = 'dpwin_policy';
	my $rows = "(-1, '2026-01-01 00:00:00', 'a'), (0, NULL, 'b'), (1, '2026-01-01 00:00:01', NULL), (2, '2026-01-01 00:00:02', 'd')";

	ch_ok("DROP DATABASE IF EXISTS " . ch_ident($pdb));
	ch_ok("CREATE DATABASE " . ch_ident($pdb) . " ENGINE = Atomic");
	ch_table($pdb, 'policed', $good);
	ch_table($pdb, 'open', $good);

	my ($code, $body) = ch("SELECT name FROM system.row_policies");
	like("$code $body", qr/^403 .*ACCESS_DENIED/s,
		'the endpoint user may not read system.row_policies (admission uses the plan)');

	# With no data parts the plan reads nothing and shows no filter: the
	# documented blind spot of the fallback, with no rows to lose.
	my $r = route($pdb, 'policed');
	my ($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, 'an empty table under a row policy is admitted by the fallback') or diag $err;

	ch_ok("INSERT INTO " . qn($pdb, 'policed') . " VALUES $rows");
	is(ch_ok("SELECT count() FROM " . qn($pdb, 'policed')), "2\n",
		'the configured row policy hides the rows with id <= 0');
	refused('row policy from the users configuration', $pdb, 'policed', undef, '55000',
		qr/ClickHouse target `dpwin_policy`\.`policed` has a row policy that filters dpwin's reads$/);
	like(psql_err(admit_sql($r)) // 'admitted',
		qr/^55000: ClickHouse target `dpwin_policy`\.`policed` has a row policy that filters dpwin's reads$/,
		'... also for the route that was admitted while the table was empty');

	# The policy is on one table: its neighbour with the same rows is read
	# in full and admitted.
	ch_ok("INSERT INTO " . qn($pdb, 'open') . " VALUES $rows");
	is(ch_ok("SELECT count() FROM " . qn($pdb, 'open')), "4\n",
		'a table without a policy in the same database shows every row');
	$r = route($pdb, 'open');
	($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, 'a table without a row policy in the same database is admitted') or diag $err;

	ch_ok("DROP DATABASE " . ch_ident($pdb));
}

# --- columns and types -------------------------------------------------------------

refused('column order differs', $db, 'order',
	"(w Nullable(DateTime64(6, 'UTC')), id Int64, v Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/column 1 of ClickHouse target `\Q$db\E`\.`order` is `w`, but column 1 of route "t040_r\d+" is "id"/);
refused('column count differs', $db, 'count',
	"(id Int64, w Nullable(DateTime64(6, 'UTC'))) ENGINE = MergeTree ORDER BY id",
	'42804', qr/ClickHouse target `\Q$db\E`\.`count` has 2 columns, route "t040_r\d+" has 3/);
refused('column name differs', $db, 'name',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), V Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/column 3 of ClickHouse target .* is `V`, but column 3 of route "t040_r\d+" is "v"/);
refused('type mismatch: Int32 for bigint', $db, 'int32',
	"(id Int32, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/column `id` of ClickHouse target `\Q$db\E`\.`int32` has type Int32, which does not match PostgreSQL type bigint/);
# A column that may hold NULLs is admitted for a type that is not Nullable
# (the encoder refuses each NULL, test/t/045_nullable.t), also under
# LowCardinality and for arrays; its type must still match.
for my $case ([ 'nn_str', 'String' ], [ 'nn_lc', 'LowCardinality(String)' ])
{
	my ($t, $vtype) = @$case;
	ch_table($db, $t, "(id Int64, w Nullable(DateTime64(6, 'UTC')), v $vtype) ENGINE = MergeTree ORDER BY id");
	my $r = route($db, $t);
	my ($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, "a text column that may hold NULLs is admitted for $vtype") or diag($err);
}
{
	ch_table($db, 'nn_arr', "(id Int64, w Nullable(DateTime64(6, 'UTC')), a Array(Int32)) ENGINE = MergeTree ORDER BY id");
	my $r = route($db, 'nn_arr', source => "$schema.src_arr");
	my ($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, 'an int4[] column that may hold NULLs is admitted for Array(Int32)') or diag($err);
}
refused('type mismatch: Int64 for a text that may hold NULLs', $db, 'nn_int',
	"(id Int64, w Nullable(DateTime64(6, 'UTC')), v Int64) ENGINE = MergeTree ORDER BY id",
	'42804', qr/column `v` of ClickHouse target `\Q$db\E`\.`nn_int` has type Int64, which does not match PostgreSQL type text/);
refused('window column DateTime64(9)', $db, 'w9',
	"(id Int64, w Nullable(DateTime64(9, 'UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/window column `w` of ClickHouse target `\Q$db\E`\.`w9` has type Nullable\(DateTime64\(9, 'UTC'\)\)/);
refused('window column in another time zone', $db, 'wtz',
	"(id Int64, w Nullable(DateTime64(6, 'Europe/Berlin')), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/window column `w` .* has type Nullable\(DateTime64\(6, 'Europe\/Berlin'\)\)/);
refused('window column without a time zone', $db, 'wnotz',
	"(id Int64, w Nullable(DateTime64(6)), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/window column `w` .* has type Nullable\(DateTime64\(6\)\)/);
refused('window column DateTime', $db, 'wdt',
	"(id Int64, w Nullable(DateTime('UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
	'42804', qr/window column `w` .* has type Nullable\(DateTime\('UTC'\)\)/);

# --- identifiers that need quoting ----------------------------------------------------

{
	my $odd = "Wé`ird'; DROP TABLE x; -- \"q\" \\ ü";
	# the table the name would drop if it were injected, wherever it ran
	ch_table($_, 'x', "(x UInt8) ENGINE = MergeTree ORDER BY x") for ('default', $odddb);
	my $x_uuids = ch_ok("SELECT arrayStringConcat(groupArray(toString(uuid)), ',') FROM system.tables WHERE name = 'x' AND database IN ('default', " . ch_literal($odddb) . ")");
	ch_table($odddb, $odd, $good);
	my $r = route($odddb, $odd);
	my ($rc, $out, $err) = psql(admit_sql($r));
	is($rc, 0, 'database and table names with quotes, backticks, semicolons, spaces and UTF-8 are admitted') or diag($err);
	is(admit_json_field($r, 'table'), $odd, '... and the table name round-trips');
	is(admit_json_field($r, 'database'), $odddb, '... and the database name round-trips');

	# a MV writing into such a table is still found
	ch_table($odddb, 'feed', $good);
	ch_ok("CREATE MATERIALIZED VIEW " . qn($odddb, "mv ' `x`") . " TO " . qn($odddb, $odd) . " AS SELECT * FROM " . qn($odddb, 'feed'));
	like(psql_err(admit_sql($r)) // 'admitted', qr/^55000: .*has dependent materialized views/,
		'a materialized view writing into an oddly named target is found');
	is(ch_ok("SELECT arrayStringConcat(groupArray(toString(uuid)), ',') FROM system.tables WHERE name = 'x' AND database IN ('default', " . ch_literal($odddb) . ")"),
		$x_uuids, 'nothing was injected: the tables named x are still there');
	ch_ok("DROP TABLE IF EXISTS default.x");
}

# --- EXCHANGE probe ------------------------------------------------------------------------

{
	# Hold the probe's EXCHANGE and its first DROP to read the probe
	# tables' UUIDs before and after the exchange.
	my $probe = qr/^EXCHANGE TABLES \Q${\ ch_ident($db)}\E\.`_dpwin_probe_/;
	fault(pattern => 'EXCHANGE TABLES ' . ch_ident($db) . '.`_dpwin_probe_', count => 1, mode => 'hold');
	fault(pattern => 'DROP TABLE IF EXISTS ' . ch_ident($db) . '.`_dpwin_probe_', count => 1, mode => 'hold');
	my $probe_uuids = sub {
		my $out = ch_ok("SELECT arrayStringConcat(groupArray(toString(uuid)), ',') FROM (SELECT uuid FROM system.tables"
			  . " WHERE database = " . ch_literal($db) . " AND startsWith(name, '_dpwin_probe_') ORDER BY name)");
		chomp $out;
		return $out;
	};
	my $h = bg_psql("SELECT dpwin_test.probe_exchange('t040_r1')");
	ok(wait_running($probe, 1, phase => 'holding'), 'the probe reaches its EXCHANGE');
	my ($ua, $ub) = split /,/, $probe_uuids->();
	release('EXCHANGE TABLES');
	ok(wait_running(qr/^DROP TABLE IF EXISTS .*_dpwin_probe_/, 1, phase => 'holding'), '... and then drops its tables');
	is($probe_uuids->(), "$ub,$ua", 'the probe tables exchanged their UUIDs');
	release('DROP TABLE');
	my ($rc, $out, $err) = bg_finish($h);
	is($rc, 0, 'EXCHANGE TABLES works in an Atomic database') or diag($err);
	is(ch_ok("SELECT count() FROM system.tables WHERE database = " . ch_literal($db) . " AND startsWith(name, '_dpwin_probe_')"),
		"0\n", 'the probe tables are dropped');
	my $mr = route($memdb, 'tm');
	like(psql_err("SELECT dpwin_test.probe_exchange(" . pg_literal($mr) . ")") // 'ok',
		qr/^0A000: ClickHouse database `\Q$memdb\E` has engine Memory, not Atomic/,
		'the probe refuses a Memory database before creating anything');
	is(ch_ok("SELECT count() FROM system.tables WHERE database = " . ch_literal($memdb) . " AND startsWith(name, '_dpwin_probe_')"),
		"0\n", '... and leaves nothing behind');
}

# --- kept rows at sub-precision window bounds ------------------------------------------

# A refresh replaces the target's rows in [lo, hi) and keeps the others.
# The bounds have digits below the window column's precision: a row that
# prints the bound's second (or millisecond) but lies before it is kept.
# $def is the target, $rows the target's rows before, $src_rows the
# source's; returns the target's ids after the refresh, in order.
sub refresh_ids
{
	my ($t, $def, $src_def, $rows, $src_rows, $lookback, $end) = @_;
	ch_table($db, $t, $def);
	ch_ok("INSERT INTO " . qn($db, $t) . " VALUES $rows");
	psql_ok("CREATE TABLE $schema.$t $src_def; INSERT INTO $schema.$t VALUES $src_rows");
	my $r = sprintf('t040_r%d', ++$nroutes);
	psql_ok("SELECT dpwin.create_route(" . pg_literal($r) . ", '$schema.$t'::regclass, 'w', "
		  . pg_literal($srv) . ", " . pg_literal($db) . ", " . pg_literal($t)
		  . ", interval '$lookback', interval '$lookback')");
	my ($rc, $out, $err) = psql("SELECT state FROM dpwin_refresh(" . pg_literal($r) . ", '$end')");
	is($rc, 0, "$t: the refresh of [$end - $lookback, $end) completes") or diag($err);
	my $ids = ch_ok("SELECT arrayStringConcat(groupArray(toString(id)), ',') FROM (SELECT id FROM "
		  . qn($db, $t) . " ORDER BY id)");
	chomp $ids;
	return $ids;
}

{
	# window [00:00:00.0005, 00:00:01) on a millisecond column: the row at
	# .000 lies before the bound although it prints the same millisecond
	is(refresh_ids('kp3', "(id Int64, w Nullable(DateTime64(3, 'UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
			"(id bigint NOT NULL, w timestamptz, v text)",
			"(1, '2026-01-01 00:00:00.000', 'old'), (2, '2026-01-01 00:00:00.001', 'old'), (3, NULL, 'old'), "
			  . "(4, '2025-12-31 23:59:59.999', 'old'), (5, '2026-01-01 00:00:01.000', 'old'), "
			  . "(6, '2026-01-01 00:00:00.999', 'old')",
			"(10, '2026-01-01 00:00:00.500+00', 'new'), (11, '2026-01-01 00:00:00.999+00', 'new'), "
			  . "(12, '2026-01-01 00:00:01+00', 'outside'), (13, NULL, 'null')",
			'999.5 milliseconds', '2026-01-01 00:00:01+00'),
		'1,3,4,5,10,11', 'DateTime64(3): rows before .0005, at the upper bound and NULL are kept; .001 and .999 replaced');

	# window [00:00:00.5, 00:00:02) on a column of whole seconds
	is(refresh_ids('kp0', "(id Int64, w DateTime64(0, 'UTC'), v Nullable(String)) ENGINE = MergeTree ORDER BY id",
			"(id bigint NOT NULL, w timestamptz NOT NULL, v text)",
			"(1, '2026-01-01 00:00:00', 'old'), (2, '2026-01-01 00:00:01', 'old'), (3, '2026-01-01 00:00:02', 'old')",
			"(10, '2026-01-01 00:00:01+00', 'new')",
			'1.5 seconds', '2026-01-01 00:00:02+00'),
		'1,3,10', 'DateTime64(0): the row at :00 before the half-second bound is kept, :01 replaced, :02 kept');
}

# --- cleanup ---------------------------------------------------------------------

ch_ok("DROP DATABASE IF EXISTS " . ch_ident($_) . "") for ($db, $memdb, $odddb);
psql_ok("SELECT dpwin.drop_route(route_name) FROM dpwin.route WHERE route_name LIKE 't040\\_%';
	DROP SCHEMA $schema CASCADE;
	DROP SERVER $srv CASCADE;");

done_testing();
