package DpwinRelease;

# Helpers of the release tests (test/t/120_update.t, 121_dump_restore.t):
# a database of its own with dpwin, a foreign server for the sandbox's
# endpoint, a source table, an evidence function and two routes, one owned
# by the superuser and one by an ordinary role; the rows of dpwin's tables
# in a form that survives a type change or a restore; the schema of a
# database as pg_dump prints it, without what differs between any two
# databases (OIDs, names of the dump's own session).

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run qw(run timeout);
use DpwinTest;

our @EXPORT = qw(setup_db setup_routes drop_db src_rows target_rows catalog_rows
  schema_dump pg_tool refresh_ok dpwin_tables);

# The tables of the extension, in dependency order.
sub dpwin_tables
{
	return qw(route lease invocation chunk publication evidence route_state verification);
}

# A client program of the sandbox's major, as the command list to run: its
# own binaries, here (15) or in the major's chroot (17 and later, whose
# binaries need the chroot's libraries), where the sandbox folder and /tmp
# are seen at the same paths and the PG* variables pass through.  The
# machine's own pg_dump is 15's, which refuses a newer server.
sub pg_tool
{
	my ($name) = @_;
	return ("$ENV{DPWIN_PGBIN}/$name") unless $ENV{DPWIN_PG_CHROOT};
	my $root = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
	return ("$root/test/pg/chroot.sh", 'run', $ENV{DPWIN_PG}, '--bind', $ENV{DPWIN_SANDBOX_DIR},
		'--bind', '/tmp', '--', "$ENV{DPWIN_PGBIN}/$name");
}

# A new database $db with dpwin (at $opt{version} if given) and what the
# routes need.  $role gets to own a route.  %opt: version, port, host (for
# another cluster), no_extension.
sub setup_db
{
	my ($db, $role, %opt) = @_;
	my %c = (db => $db);
	psql_ok("CREATE DATABASE $db");
	psql_ok("CREATE EXTENSION dpwin" . ($opt{version} ? " VERSION '$opt{version}'" : ''), %c)
	  unless $opt{no_extension};
	psql_ok(<<"SQL", %c);
CREATE SERVER ch FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}');
CREATE USER MAPPING FOR PUBLIC SERVER ch
	OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');
GRANT USAGE ON FOREIGN SERVER ch TO $role;
CREATE SCHEMA s;
GRANT USAGE ON SCHEMA s TO $role;
CREATE TABLE s.src (id bigint NOT NULL, w timestamptz, v text);
INSERT INTO s.src
	SELECT g, timestamptz '2026-09-07 00:00:00+00' + g * interval '7 minutes 13 seconds', 'v' || (g % 11)
	FROM generate_series(0, 999) g;
INSERT INTO s.src VALUES (5000, '2026-09-08 12:00:00+00', 'dup'), (5000, '2026-09-08 12:00:00+00', 'dup'),
	(5001, NULL, 'no window');
GRANT SELECT ON s.src TO $role;
CREATE TABLE s.ev_log (invocation uuid, metrics jsonb);
CREATE FUNCTION s.ev(inv uuid, metrics jsonb) RETURNS void LANGUAGE sql
	AS 'INSERT INTO s.ev_log VALUES (inv, metrics)';
SQL
}

# Two routes of $db into ClickHouse database $chdb: r_ev (the superuser's,
# with evidence function s.ev) into table ev, r_role ($role's) into table
# rl; both one-day windows of 6-hour chunks.
sub setup_routes
{
	my ($db, $chdb, $role) = @_;
	ch_ok("DROP DATABASE IF EXISTS `$chdb`");
	ch_ok("CREATE DATABASE `$chdb` ENGINE = Atomic");
	for my $t (qw(ev rl))
	{
		ch_ok("CREATE TABLE `$chdb`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
			  . " ENGINE = MergeTree ORDER BY id");
	}
	psql_ok("SELECT dpwin.create_route('r_ev', 's.src', 'w', 'ch', '$chdb', 'ev',"
		  . " interval '1 day', interval '6 hours', parallelism => 2, evidence_function => 's.ev(uuid, jsonb)')",
		db => $db);
	psql_ok("SET ROLE $role; SELECT dpwin.create_route('r_role', 's.src', 'w', 'ch', '$chdb', 'rl',"
		  . " interval '1 day', interval '6 hours')",
		db => $db);
}

sub drop_db
{
	my ($db, $chdb) = @_;
	psql_ok("DROP DATABASE IF EXISTS $db");
	ch_ok("DROP DATABASE IF EXISTS `$chdb`") if $chdb;
}

# The source rows of [$lo, $hi) of $db, and the rows of ClickHouse table
# `$chdb`.`$t`, as sorted "id|w in Unix microseconds|v" lines.
sub src_rows
{
	my ($db, $lo, $hi) = @_;
	my $out = psql_ok("SELECT id || '|' || (extract(epoch FROM w) * 1000000)::bigint || '|' || coalesce(v, 'NULL')"
		  . " FROM s.src WHERE w >= '$lo' AND w < '$hi'", db => $db);
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

sub target_rows
{
	my ($chdb, $t) = @_;
	my $out = ch_ok("SELECT concat(toString(id), '|', ifNull(toString(toUnixTimestamp64Micro(w)), 'NULL'),"
		  . " '|', ifNull(v, 'NULL')) FROM `$chdb`.`$t` FORMAT TSVRaw");
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

# refresh_ok($db, $route, $end): the refresh's "invocation_id|state".
sub refresh_ok
{
	my ($db, $route, $end, %opt) = @_;
	return psql_ok("SELECT invocation_id, state FROM dpwin_refresh('$route', '$end')", db => $db, %opt);
}

# Every row of every dpwin table of $db as sorted text lines per table.
# The columns that hold relations, roles and functions are shown as
# $how: 'oid' (their numbers: the same rows before and after an update)
# or 'name' (what must survive a dump and restore).  The columns named in
# @added (columns an update adds) are left out.
sub catalog_rows
{
	my ($db, $how, @added) = @_;
	my %rows;
	for my $t (dpwin_tables())
	{
		my @ref = grep { column_exists($db, $t, $_) } qw(source_relid owner caller_role evidence_function);
		my $strip = join('', map { " - '$_'" } @ref, grep { column_exists($db, $t, $_) } @added);
		my $show = join(" || '|' || ",
			"(to_jsonb(t)$strip)::text",
			map { ref_column($_, $how) } @ref);
		my $out = psql_ok("SET search_path = pg_catalog; SELECT $show FROM dpwin.$t t", db => $db);
		$rows{$t} = [ sort grep { $_ ne '' } split /\n/, $out ];
	}
	return \%rows;
}

sub column_exists
{
	my ($db, $t, $c) = @_;
	return psql_ok("SELECT count(*) FROM pg_attribute WHERE attrelid = 'dpwin.$t'::regclass"
		  . " AND attname = '$c' AND NOT attisdropped", db => $db);
}

sub ref_column
{
	my ($c, $how) = @_;
	return "coalesce(t.${c}::text, 'NULL')" if $c eq 'evidence_function';
	return "t.${c}::oid::text" if $how eq 'oid';
	return $c eq 'source_relid' ? "t.${c}::regclass::text" : "t.${c}::regrole::text";
}

# pg_dump --schema-only --binary-upgrade of $db (which prints every member
# of an extension, not just CREATE EXTENSION), without the lines that name
# OIDs, transaction ids, sequence values or the dump's session.
sub schema_dump
{
	my ($db) = @_;
	my ($out, $err) = ('', '');
	run [ pg_tool('pg_dump'), '--schema-only', '--binary-upgrade', '-d', $db ],
	  '>', \$out, '2>', \$err, timeout(300)
	  or die "pg_dump $db failed: $err";
	my @keep = grep {
		!/binary_upgrade_set_next_|binary_upgrade_create_empty_extension|relfrozenxid|^--|^\\(un)?restrict|^$/
		  && !/^WHERE oid = '\d+';$/	# a TOAST table's number
		  && !/^SELECT pg_catalog\.setval\(/	# a sequence's value: data
	} split /\n/, $out;
	return join("\n", @keep) . "\n";
}

1;
