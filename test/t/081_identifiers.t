# Identifiers that need quoting, on both sides.  The PostgreSQL source
# (schema, table, every column including the window column) and the
# ClickHouse target (database, table, the same column names) are named
# with double quotes, single quotes, spaces, semicolons, backticks,
# backslashes, mixed case and multi-byte UTF-8, several of them shaped as
# SQL injections aimed at a canary table on each side.  A full
# dpwin_refresh must publish exactly the source window, keep the rest, and
# every dpwin function that names these objects must work; afterwards both
# canaries are intact and nothing else changed on either side.  Route
# names are restricted to a pattern: an injection there is refused.
use strict;
use warnings;
use utf8;
use Test::More;
use DpwinTest;
use DpwinFixture qw(pg_literal pg_ident ch_literal ch_ident sorted_lines);

binmode(Test::More->builder->$_, ':encoding(UTF-8)') for qw(output failure_output todo_output);

my $tag = "t081_$$";
my $route = "${tag}_r";
my $srv = "${tag}_ch";
my $pg_canary = "${tag}_canary";       # public.<this>
my $ch_canary_db = "${tag}_canary";    # <this>.canary

# PostgreSQL names (each at most 63 bytes)
my $schema = qq{Évé "S" 'q'; DROP TABLE public.$pg_canary; --};
my $table = qq{Tab`le "x"; DROP TABLE public.$pg_canary};
my $c_id = qq{I"d" 'K'};
my $c_w = qq{Wh'en `ts`; DROP};
my $c_v = qq{Événements "x"; DROP};
my $c_mix = qq{MiXeD Case\\ 😀};
my $c_inj = qq{c`; DROP TABLE $ch_canary_db.canary; --};
my @cols = ($c_id, $c_w, $c_v, $c_mix, $c_inj);

# ClickHouse names
my $db = qq{Db "x" 'y' `z`\\; DROP DATABASE $ch_canary_db; -- $$};
my $ch_table = qq{Événements "x"; DROP TABLE $ch_canary_db.canary; --'};

for my $n ($schema, $table, @cols)
{
	my $len = do { use bytes; length($n) };
	die "name too long for PostgreSQL: $n ($len bytes)" if $len > 63;
}

my $pg_src = pg_ident($schema) . '.' . pg_ident($table);
my $ch_tgt = ch_ident($db) . '.' . ch_ident($ch_table);
my ($qid, $qw, $qv, $qmix, $qinj) = map { pg_ident($_) } @cols;
my ($cid, $cw, $cv, $cmix, $cinj) = map { ch_ident($_) } @cols;

# psql and ClickHouse take and answer UTF-8 bytes; the test works with
# characters
sub bytes_of { my ($s) = @_; utf8::encode($s); return $s; }
sub pg { my $out = psql_ok(bytes_of($_[0])); utf8::decode($out); return $out; }
# (TabSeparatedRaw: TabSeparated would escape quotes and backslashes)
sub chq { my $out = ch_ok(bytes_of($_[0]) . ' FORMAT TabSeparatedRaw'); utf8::decode($out); chomp $out; return $out; }
sub chx { ch_ok(bytes_of($_[0])); }
sub pg_e { my $e = psql_err(bytes_of($_[0])); utf8::decode($e) if defined $e; return $e; }

# ---- what exists before ----------------------------------------------------

sub pg_objects
{
	return pg("SELECT string_agg(n.nspname || '.' || c.relname, ',' ORDER BY 1)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		  AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname <> " . pg_literal($schema));
}

sub ch_objects
{
	return chq("SELECT arrayStringConcat(groupArray(database || '.' || name), ',') FROM
		(SELECT database, name FROM system.tables WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema')
		   AND database <> " . ch_literal($db) . " ORDER BY database, name)");
}

sub ch_databases
{
	return chq("SELECT arrayStringConcat(groupArray(name), ',') FROM (SELECT name FROM system.databases ORDER BY name)");
}

chx("DROP DATABASE IF EXISTS " . ch_ident($db));
chx("DROP DATABASE IF EXISTS " . ch_ident($ch_canary_db));
chx("CREATE DATABASE " . ch_ident($ch_canary_db) . " ENGINE = Atomic");
chx("CREATE TABLE " . ch_ident($ch_canary_db) . ".canary (x Int32) ENGINE = MergeTree ORDER BY x");
chx("INSERT INTO " . ch_ident($ch_canary_db) . ".canary VALUES (1), (2), (3)");

pg("DROP SCHEMA IF EXISTS " . pg_ident($schema) . " CASCADE;
	DROP TABLE IF EXISTS public.$pg_canary;
	DROP SERVER IF EXISTS $srv CASCADE;
	CREATE TABLE public.$pg_canary (x int);
	INSERT INTO public.$pg_canary VALUES (1), (2), (3);
	CREATE SERVER $srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url " . pg_literal($ENV{DPWIN_CH_URL}) . ");
	CREATE USER MAPPING FOR CURRENT_USER SERVER $srv
		OPTIONS (user " . pg_literal($ENV{DPWIN_CH_REFRESH_USER}) . ", password " . pg_literal($ENV{DPWIN_CH_PASSWORD}) . ");");

my $pg_before = pg_objects();
my $ch_before = ch_objects();
my $dbs_before = ch_databases();

# ---- source and target ---------------------------------------------------------

chx("CREATE DATABASE " . ch_ident($db) . " ENGINE = Atomic");
chx("CREATE TABLE $ch_tgt ($cid Int64, $cw Nullable(DateTime64(6, 'UTC')), $cv Nullable(String),"
	  . " $cmix Int32, $cinj Nullable(String)) ENGINE = MergeTree ORDER BY $cid");
is(chq("SELECT name FROM system.tables WHERE database = " . ch_literal($db)), $ch_table,
	'the ClickHouse target exists under its exact name');
is(chq("SELECT arrayStringConcat(groupArray(name), '|') FROM (SELECT name FROM system.columns WHERE database = "
	  . ch_literal($db) . " AND table = " . ch_literal($ch_table) . " ORDER BY position)"),
	join('|', @cols), '... with the exact column names');

pg("CREATE SCHEMA " . pg_ident($schema) . ";
	CREATE TABLE $pg_src ($qid bigint NOT NULL, $qw timestamptz, $qv text, $qmix int NOT NULL, $qinj text);
	INSERT INTO $pg_src
	SELECT g,
		   CASE WHEN g % 50 = 0 THEN NULL
				ELSE timestamptz '2026-09-05 00:00:00+00' + g * interval '7 minutes 3.000001 seconds' END,
		   CASE WHEN g % 9 = 0 THEN NULL ELSE 'v ' || g || ' \"q\" ''s'' `b` ; é 😀' END,
		   g % 7,
		   CASE WHEN g % 11 = 0 THEN NULL ELSE '); DROP TABLE public.$pg_canary; --' || g END
	  FROM generate_series(1, 2000) g;
	-- duplicates
	INSERT INTO $pg_src SELECT * FROM $pg_src WHERE $qid % 100 = 1;");
is(pg("SELECT count(*) FROM $pg_src"), 2020, 'the PostgreSQL source exists under its exact names');

# the target has rows inside the window (to be replaced), outside it and
# with a NULL window value (to be kept)
chx("INSERT INTO $ch_tgt VALUES
	(-1, '2026-09-01 00:00:00', 'old outside', 1, 'k'),
	(-2, NULL, 'old null', 2, NULL),
	(-3, '2026-09-08 12:00:00', 'old inside', 3, 'x'),
	(-4, '2026-09-09 00:00:00', 'old at hi', 4, 'y')");

# ---- the route -------------------------------------------------------------------

# an injection through the route name is refused by its pattern
like(pg_e("SELECT dpwin.create_route('x''); DROP TABLE public.$pg_canary; --', "
	  . pg_literal($pg_src) . "::regclass, " . pg_literal($c_w) . ", '$srv', " . pg_literal($db) . ", "
	  . pg_literal($ch_table) . ", '3 days', '12 hours')") // 'ok',
	qr/^42602: invalid route name "x'\); DROP TABLE public\.\Q$pg_canary\E; --"/,
	'an injection through the route name is refused (42602)');
like(pg_e("SELECT dpwin.create_route('r`x`', " . pg_literal($pg_src) . "::regclass, " . pg_literal($c_w)
	  . ", '$srv', " . pg_literal($db) . ", " . pg_literal($ch_table) . ", '3 days', '12 hours')") // 'ok',
	qr/^42602: invalid route name/, 'a backtick in a route name is refused (42602)');
like(pg_e("SELECT dpwin.create_route(" . pg_literal("Événements") . ", " . pg_literal($pg_src) . "::regclass, "
	  . pg_literal($c_w) . ", '$srv', " . pg_literal($db) . ", " . pg_literal($ch_table) . ", '3 days', '12 hours')") // 'ok',
	qr/^42602: invalid route name/, 'a non-ASCII route name is refused (42602)');

my $cols_arr = "ARRAY[" . join(', ', map { pg_literal($_) } @cols) . "]::name[]";
pg("SELECT dpwin.create_route('$route', " . pg_literal($pg_src) . "::regclass, " . pg_literal($c_w)
	  . ", '$srv', " . pg_literal($db) . ", " . pg_literal($ch_table)
	  . ", '3 days', '12 hours', parallelism => 3, batch_rows => 97, columns => $cols_arr)");
is(pg("SELECT source_schema || '|' || source_table || '|' || window_column || '|' || target_database || '|' || target_table
	FROM dpwin.routes WHERE route_name = '$route'"),
	join('|', $schema, $table, $c_w, $db, $ch_table), 'dpwin.routes shows every name exactly');
is(pg("SELECT array_to_string(columns, '|') FROM dpwin.routes WHERE route_name = '$route'"),
	join('|', @cols), '... and the columns');
is(pg("SELECT dpwin_test.admit_target('$route') ->> 'quoted_columns'"),
	join(', ', $cid, $cw, $cv, $cmix, $cinj), 'admission quotes every target column');

# ---- refresh ----------------------------------------------------------------------

my $hi = '2026-09-09 00:00:00+00';
my $lo = '2026-09-06 00:00:00+00';
my $out = pg("SELECT state || '|' || source_rows || '|' || final_rows || '|' || invocation_id || '|' || backup_table
	FROM dpwin_refresh('$route', '$hi')");
my ($state, $nsrc, $nfinal, $inv, $backup) = split /\|/, $out;
is($state, 'completed', 'dpwin_refresh completed');
my $nwin = pg("SELECT count(*) FROM $pg_src WHERE $qw >= '$lo' AND $qw < '$hi'");
is($nsrc, $nwin, "it read the $nwin source rows of the window");

# canonical rows: id, window ticks, hex of the strings, the int
my $pg_canon = "concat_ws('|', $qid, COALESCE((extract(epoch FROM $qw) * 1000000)::bigint::text, 'N'),"
  . " COALESCE(encode(convert_to($qv, 'UTF8'), 'hex'), 'N'), $qmix,"
  . " COALESCE(encode(convert_to($qinj, 'UTF8'), 'hex'), 'N'))";
my $ch_canon = "concat($cid, '|', if(isNull($cw), 'N', toString(toUnixTimestamp64Micro(assumeNotNull($cw)))), '|',"
  . " if(isNull($cv), 'N', lower(hex(assumeNotNull($cv)))), '|', toString($cmix), '|',"
  . " if(isNull($cinj), 'N', lower(hex(assumeNotNull($cinj)))))";
my $ch_in = "$cw >= toDateTime64('2026-09-06 00:00:00', 6, 'UTC') AND $cw < toDateTime64('2026-09-09 00:00:00', 6, 'UTC')";

my $src_rows = sorted_lines(pg("SELECT $pg_canon FROM $pg_src WHERE $qw >= '$lo' AND $qw < '$hi'"));
my $tgt_rows = sorted_lines(chq("SELECT $ch_canon FROM $ch_tgt WHERE $ch_in"));
is(scalar(@$tgt_rows), scalar(@$src_rows), 'the target window has as many rows as the source window');
is_deeply($tgt_rows, $src_rows, 'the target window equals the source window as a multiset (duplicates included)');
is(chq("SELECT arrayStringConcat(groupArray(toString($cid)), ',') FROM (SELECT $cid FROM $ch_tgt WHERE $cid < 0 ORDER BY $cid DESC)"),
	'-1,-2,-4', 'rows outside the window and with a NULL window value were kept, the stale window row replaced');
is(chq("SELECT count() FROM $ch_tgt"), $nwin + 3, 'the target holds the window plus the kept rows');

# the other API calls that name the objects
like(pg("SELECT dpwin.reconcile('$inv') ->> 'verdict'"), qr/^published$/, 'dpwin.reconcile finds the published generation');
is(pg("SELECT dpwin.reconcile('$inv') ->> 'target'"), $ch_tgt, '... and names the target with ClickHouse quoting');
is(chq("SELECT count() FROM system.tables WHERE database = " . ch_literal($db) . " AND name = " . ch_literal($backup)),
	1, "the backup table $backup exists in the oddly named database");
is(pg("SELECT count(*) FROM dpwin.plan('$route', '$hi')"), 6, 'dpwin.plan works');
ok(pg("SELECT dpwin.lock_target('$srv', " . pg_literal($db) . ", " . pg_literal($ch_table) . ")
	AND dpwin.unlock_target('$srv', " . pg_literal($db) . ", " . pg_literal($ch_table) . ")") eq 't',
	'lock_target/unlock_target take the oddly named target');

# a second refresh of the same window (the target is now dpwin's
# generation) and then drop_backups in that database
$out = pg("SELECT state FROM dpwin_refresh('$route', '$hi')");
is($out, 'completed', 'a second refresh of the window completed');
is_deeply(sorted_lines(chq("SELECT $ch_canon FROM $ch_tgt WHERE $ch_in")), $src_rows, '... with the same window content');
is(pg("SELECT count(*) FROM dpwin.drop_backups('$route', 0)"), 2, 'drop_backups dropped both backups');
is(chq("SELECT count() FROM system.tables WHERE database = " . ch_literal($db)), 1,
	'only the target is left in its database');

# ---- nothing was injected --------------------------------------------------------

is(pg("SELECT string_agg(x::text, ',' ORDER BY x) FROM public.$pg_canary"), '1,2,3', 'the PostgreSQL canary is intact');
is(chq("SELECT arrayStringConcat(groupArray(toString(x)), ',') FROM (SELECT x FROM " . ch_ident($ch_canary_db) . ".canary ORDER BY x)"),
	'1,2,3', 'the ClickHouse canary is intact');
is(pg_objects(), $pg_before, 'no other PostgreSQL relation appeared or disappeared');
is(ch_objects(), $ch_before, 'no other ClickHouse table appeared or disappeared');
is(ch_databases(), join(',', sort(split(/,/, $dbs_before), $db)), 'no other ClickHouse database appeared or disappeared')
  or diag("before: $dbs_before");

# ---- clean up -----------------------------------------------------------------------

pg("SELECT dpwin.drop_route('$route');
	DROP SCHEMA " . pg_ident($schema) . " CASCADE;
	DROP TABLE public.$pg_canary;
	DROP SERVER $srv CASCADE;
	DELETE FROM dpwin.lease WHERE server_name = '$srv'");
chx("DROP DATABASE IF EXISTS " . ch_ident($db));
chx("DROP DATABASE IF EXISTS " . ch_ident($ch_canary_db));

done_testing();
