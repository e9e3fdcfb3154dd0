# The update path from 0.1.0, as a DBA takes it: a database that ran
# CREATE EXTENSION dpwin VERSION '0.1.0' and has routes, a journal,
# evidence, leases and verifications gets the new library (the library of
# this tree), which refuses to work on the old catalog, with a hint, before
# any I/O; ALTER EXTENSION dpwin UPDATE then gives exactly the schema of a
# fresh install (pg_dump of every member of the extension, the tables
# registered for dump), keeps every row, and the routes refresh, verify and
# recover again.
#
# The rows of the 0.1.0 catalog are written by this library: its
# statements are those of 0.1.0 except for the types of the columns that
# 0.2.0 changes, which they read and write through casts valid for both.
# For that, and only there, the test presents the 0.1.0 catalog to the
# version check as 0.2.0 by editing pg_extension.extversion.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../pg";
use File::Temp ();
use Test::More;
use DpwinTest;
use DpwinFixture qw(multiset_is);
use DpwinRelease;

my $db = "t120_$$";
my $fresh = "t120f_$$";
my $chdb = "t120_$$";
my $role = "t120_owner_$$";
my $E1 = '2026-09-09 00:00:00+00';
my $E2 = '2026-09-10 00:00:00+00';

psql_ok("CREATE ROLE $role LOGIN; GRANT dpwin_operator TO $role");

# --- 0.1.0 --------------------------------------------------------------

setup_db($db, $role, version => '0.1.0');
is(psql_ok("SELECT extversion FROM pg_extension WHERE extname = 'dpwin'", db => $db), '0.1.0',
	'CREATE EXTENSION dpwin VERSION 0.1.0 installs the frozen 0.1.0 script');
is(psql_ok("SELECT format_type(atttypid, NULL) FROM pg_attribute"
		  . " WHERE attrelid = 'dpwin.route'::regclass AND attname = 'evidence_function'", db => $db),
	'regprocedure', '0.1.0 stores the evidence function as regprocedure');

my $seq = ch_log_seq();
my $err = psql_err("SELECT dpwin.create_route('r_x', 's.src', 'w', 'ch', 'd', 't', interval '1 day', interval '1 day')",
	db => $db);
like($err, qr/^55000: extension "dpwin" is at version 0\.1\.0, which this library does not support/,
	'the library refuses the 0.1.0 catalog (SQLSTATE 55000, the version named)');
my (undef, undef, $stderr) = psql("SELECT dpwin.create_route('r_x', 's.src', 'w', 'ch', 'd', 't',"
	  . " interval '1 day', interval '1 day')", db => $db);
like($stderr, qr/HINT:\s+Run ALTER EXTENSION dpwin UPDATE\./, 'the error says what to run');

# rows as the 0.1.0 library writes them (see the header)
psql_ok("UPDATE pg_extension SET extversion = '0.2.0' WHERE extname = 'dpwin'", db => $db);
setup_routes($db, $chdb, $role);
my ($inv_ev, $st_ev) = split /\|/, refresh_ok($db, 'r_ev', $E1);
my ($inv_rl, $st_rl) = split /\|/, refresh_ok($db, 'r_role', $E1, user => $role);
is("$st_ev $st_rl", 'completed completed', '0.1.0: both routes refresh');
psql_ok("SELECT count(*) FROM dpwin.verify('r_ev', '$E1')", db => $db);
psql_ok("UPDATE pg_extension SET extversion = '0.1.0' WHERE extname = 'dpwin'", db => $db);

my %n = map { $_ => psql_ok("SELECT count(*) FROM dpwin.$_", db => $db) } dpwin_tables();
ok($n{route} == 2 && $n{invocation} == 2 && $n{chunk} == 8 && $n{evidence} == 2 && $n{lease} == 2
	  && $n{publication} == 2 && $n{route_state} == 2 && $n{verification} == 1,
	'0.1.0: routes, journal, evidence, leases and a verification hold rows')
  or diag(join ' ', map { "$_=$n{$_}" } sort keys %n);

$seq = ch_log_seq();
$err = psql_err("SELECT * FROM dpwin_refresh('r_ev', '$E2')", db => $db);
like($err, qr/^55000: .*version 0\.1\.0/, 'a refresh on the 0.1.0 catalog is refused');
$err = psql_err("SELECT * FROM dpwin.verify('r_ev', '$E1')", db => $db);
like($err, qr/^55000: .*version 0\.1\.0/, 'a verification on the 0.1.0 catalog is refused');
$err = psql_err("SELECT * FROM dpwin.recover('$inv_ev')", db => $db);
like($err, qr/^55000: .*version 0\.1\.0/, 'a recovery on the 0.1.0 catalog is refused');
is(scalar(ch_log_since($seq)), 0, 'the refused calls sent nothing to ClickHouse');
is(psql_ok("SELECT count(*) FROM dpwin.invocation", db => $db), 2, 'and wrote no invocation');

my $before = catalog_rows($db, 'oid');

# --- the update --------------------------------------------------------

psql_ok("ALTER EXTENSION dpwin UPDATE", db => $db);
is(psql_ok("SELECT extversion FROM pg_extension WHERE extname = 'dpwin'", db => $db), '0.2.0',
	'ALTER EXTENSION dpwin UPDATE goes to 0.2.0');

setup_db($fresh, $role);
is(psql_ok("SELECT extversion FROM pg_extension WHERE extname = 'dpwin'", db => $fresh), '0.2.0',
	'a fresh install is 0.2.0');
my ($d_upd, $d_new) = (schema_dump($db), schema_dump($fresh));
ok(length($d_new) > 10_000 && $d_new =~ /CREATE TABLE dpwin\.verification/,
	'the fresh dump prints the extension\'s members');
ok($d_upd eq $d_new, 'pg_dump --schema-only: the updated database is exactly a fresh install')
  or diag(dump_diff($d_upd, $d_new));
my $extconfig = "SELECT array_agg(c::regclass::text ORDER BY o) || extcondition FROM pg_extension,"
  . " unnest(extconfig) WITH ORDINALITY u(c, o) WHERE extname = 'dpwin' GROUP BY extcondition";
is(psql_ok($extconfig, db => $db), psql_ok($extconfig, db => $fresh),
	'the same tables are registered for dump, with the same filters');
like(psql_ok($extconfig, db => $fresh), qr/dpwin\.verification/, 'dpwin.verification is registered for dump');

is_deeply(catalog_rows($db, 'oid', qw(keep_backups stale_after backfill_id backup_dropped_at kind)), $before,
	'every row of every dpwin table is kept');
is(psql_ok("SELECT (SELECT count(*) FROM dpwin.route WHERE keep_backups = 3 AND stale_after IS NULL)"
	  . " || '|' || (SELECT count(*) FROM dpwin.invocation WHERE backfill_id IS NULL)"
	  . " || '|' || (SELECT count(*) FROM dpwin.publication WHERE backup_dropped_at IS NULL)"
	  . " || '|' || (SELECT count(*) FROM dpwin.backfill)", db => $db), '2|2|2|0',
	'the columns the update adds hold their defaults: keep_backups 3, no backfill, no backup dropped');
is(psql_ok("SELECT string_agg(DISTINCT kind, ',') FROM dpwin.invocation", db => $db), 'refresh',
	'every invocation of 0.1.0 is a refresh');
is(psql_ok("SELECT evidence_function FROM dpwin.route WHERE route_name = 'r_ev'", db => $db),
	's.ev(uuid,jsonb)', 'the evidence function is stored by its qualified signature');
is(psql_ok("SELECT source_relid || ' ' || owner FROM dpwin.route WHERE route_name = 'r_role'", db => $db),
	"s.src $role", 'source and owner read as names');

# --- the routes work again -----------------------------------------------

my ($inv2, $st2) = split /\|/, refresh_ok($db, 'r_ev', $E2);
is($st2, 'completed', 'after the update: r_ev refreshes the next window');
multiset_is(target_rows($chdb, 'ev'), src_rows($db, '2026-09-08 00:00:00+00', $E2),
	'the target holds exactly the source rows of both windows');
is(psql_ok("SELECT count(*) FROM s.ev_log WHERE invocation = '$inv2'", db => $db), 1,
	'the evidence function stored by signature is called');
my ($inv3, $st3) = split /\|/, refresh_ok($db, 'r_role', $E2, user => $role);
is($st3, 'completed', 'after the update: the role\'s route refreshes as its owner');
multiset_is(target_rows($chdb, 'rl'), src_rows($db, '2026-09-08 00:00:00+00', $E2),
	'its target holds exactly the source rows of both windows');
is(psql_ok("SELECT bool_and(matches) FROM dpwin.verify('r_ev', '$E2')", db => $db), 't',
	'after the update: verify finds the window matching');
is(psql_ok("SELECT state FROM dpwin.recover('$inv_ev')", db => $db), 'completed',
	'after the update: recover reads the 0.1.0 journal of an invocation');
is(psql_ok("SELECT state FROM dpwin.recover('$inv2')", db => $db), 'completed',
	'after the update: recover of a new invocation');
is(psql_ok("SELECT count(*) FROM dpwin.invocations WHERE caller = '$role'::regrole", db => $db), 2,
	'the journal names the role of the calls of both versions');

# a stored signature that no longer resolves is named, before any I/O
psql_ok("ALTER FUNCTION s.ev(uuid, jsonb) RENAME TO ev_gone", db => $db);
$seq = ch_log_seq();
$err = psql_err("SELECT * FROM dpwin_refresh('r_ev', '2026-09-11 00:00:00+00')", db => $db);
is($err, '42883: evidence function s.ev(uuid,jsonb) of route "r_ev" does not exist',
	'a missing evidence function is an error naming it');
is(scalar(ch_log_since($seq)), 0, 'before any I/O');

# The differences of two dumps, as diff -u prints them.
sub dump_diff
{
	my ($a, $b) = @_;
	my $dir = File::Temp::tempdir(CLEANUP => 1);
	for ([ 'updated', $a ], [ 'fresh', $b ])
	{
		open my $fh, '>', "$dir/$_->[0]" or die $!;
		print $fh $_->[1];
		close $fh;
	}
	return scalar `diff -u $dir/updated $dir/fresh`;
}

# --- cleanup ------------------------------------------------------------

drop_db($db, $chdb);
drop_db($fresh);
psql_ok("DROP ROLE $role");

done_testing();
