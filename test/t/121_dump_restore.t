# A dump and restore, as a DBA makes one: pg_dump -Fc of a database with
# routes, journal, evidence, leases and verifications; the database and the
# route's roles dropped, the roles created again in another order (so that
# their OIDs differ, as on another cluster); pg_restore into a new
# database.  Every row of every dpwin table comes back, each route's
# source and owner are the same table and role by name (with other OIDs),
# and the restored routes refresh exactly, as their owners, with the
# evidence function the route names.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../pg";
use File::Temp ();
use IPC::Run qw(run timeout);
use Test::More;
use DpwinTest;
use DpwinFixture qw(multiset_is);
use DpwinRelease;

my $db = "t121_$$";
my $restored = "t121r_$$";
my $chdb = "t121_$$";
my $role = "t121_owner_$$";
my $other = "t121_other_$$";
my $E1 = '2026-09-09 00:00:00+00';
my $E2 = '2026-09-10 00:00:00+00';

psql_ok("CREATE ROLE $role LOGIN; GRANT dpwin_operator TO $role");

setup_db($db, $role);
setup_routes($db, $chdb, $role);
my ($inv_ev, $st_ev) = split /\|/, refresh_ok($db, 'r_ev', $E1);
my ($inv_rl, $st_rl) = split /\|/, refresh_ok($db, 'r_role', $E1, user => $role);
is("$st_ev $st_rl", 'completed completed', 'both routes refresh before the dump');
is(psql_ok("SELECT bool_and(matches) FROM dpwin.verify('r_role', '$E1')", db => $db, user => $role), 't',
	'and verify');

my %n = map { $_ => psql_ok("SELECT count(*) FROM dpwin.$_", db => $db) } dpwin_tables();
ok(!grep({ $n{$_} == 0 } dpwin_tables()), 'every dpwin table holds rows before the dump')
  or diag(join ' ', map { "$_=$n{$_}" } sort keys %n);
my $before = catalog_rows($db, 'name');
my ($src_oid, $owner_oid) = split /\|/,
  psql_ok("SELECT source_relid::oid, owner::oid FROM dpwin.route WHERE route_name = 'r_role'", db => $db);

# --- dump, drop, new roles, restore ------------------------------------------

my $dir = File::Temp::tempdir(CLEANUP => 1);
my ($out, $err) = ('', '');
run [ pg_tool('pg_dump'), '-Fc', '-f', "$dir/db.dump", '-d', $db ], '>', \$out, '2>', \$err, timeout(300)
  or die "pg_dump failed: $err";
ok(-s "$dir/db.dump", 'pg_dump -Fc writes the dump');

drop_db($db);
psql_ok("DROP ROLE $role");
# the roles again, another one first: every OID differs from the dumped ones
psql_ok("CREATE ROLE $other; CREATE ROLE $role LOGIN; GRANT dpwin_operator TO $role");
isnt(psql_ok("SELECT '$role'::regrole::oid"), $owner_oid, 'the owner role has another OID now');

psql_ok("CREATE DATABASE $restored");
ok(run([ pg_tool('pg_restore'), '--exit-on-error', '-d', $restored, "$dir/db.dump" ],
		'>', \$out, '2>', \$err, timeout(300)), 'pg_restore into a new database succeeds')
  or die "pg_restore failed: $err";
is($err, '', 'pg_restore reports nothing');

# --- every row, the right source and owner ---------------------------------

my $after = catalog_rows($restored, 'name');
for my $t (dpwin_tables())
{
	is_deeply($after->{$t}, $before->{$t}, "dpwin.$t: every row is restored ("
		  . scalar(@{ $before->{$t} }) . ")");
}
my ($src_now, $owner_now, $src_name, $owner_name) = split /\|/,
  psql_ok("SELECT source_relid::oid, owner::oid, source_relid, owner FROM dpwin.route"
	  . " WHERE route_name = 'r_role'", db => $restored);
is("$src_name $owner_name", "s.src $role", "the route's source and owner are the same by name");
is($src_now, psql_ok("SELECT 's.src'::regclass::oid", db => $restored), 'the source is the restored table');
isnt($src_now, $src_oid, 'whose OID differs from the dumped one');
is($owner_now, psql_ok("SELECT '$role'::regrole::oid"), 'the owner is the role of that name now');
is(psql_ok("SELECT owner FROM dpwin.routes WHERE route_name = 'r_ev'", db => $restored), 'postgres',
	'the superuser\'s route is still the superuser\'s');
is(psql_ok("SELECT count(*) FROM dpwin.invocations WHERE caller = '$role'::regrole", db => $restored), 1,
	'the journal names the role of the call');

# --- the restored routes refresh exactly ---------------------------------

my ($inv2, $st2) = split /\|/, refresh_ok($restored, 'r_role', $E2, user => $role);
is($st2, 'completed', 'the restored route refreshes as its owner');
multiset_is(target_rows($chdb, 'rl'), src_rows($restored, '2026-09-08 00:00:00+00', $E2),
	'its target holds exactly the source rows of both windows');
my ($inv3, $st3) = split /\|/, refresh_ok($restored, 'r_ev', $E2);
is($st3, 'completed', 'the restored route with an evidence function refreshes');
multiset_is(target_rows($chdb, 'ev'), src_rows($restored, '2026-09-08 00:00:00+00', $E2),
	'its target holds exactly the source rows of both windows');
is(psql_ok("SELECT count(*) FROM s.ev_log WHERE invocation = '$inv3'", db => $restored), 1,
	'the evidence function is found by its signature and called');
is(psql_ok("SELECT bool_and(matches) FROM dpwin.verify('r_ev', '$E2')", db => $restored), 't',
	'verify on the restored database finds the window matching');
is(psql_ok("SELECT state FROM dpwin.recover('$inv_rl')", db => $restored, user => $role), 'completed',
	'recover reads the restored journal');
is(psql_ok("SELECT (SELECT lease_epoch FROM dpwin.invocation WHERE invocation_id = '$inv2')"
		  . " > (SELECT lease_epoch FROM dpwin.invocation WHERE invocation_id = '$inv_rl')", db => $restored), 't',
	'the restored lease epoch of the target goes on from the dumped one');

# --- cleanup ------------------------------------------------------------

drop_db($restored, $chdb);
psql_ok("DROP ROLE $role; DROP ROLE $other");

done_testing();
