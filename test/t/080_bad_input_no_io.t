# The bad inputs of sql/bad_input.sql that dpwin can detect before any I/O,
# against a live endpoint: each is refused with its SQLSTATE and message,
# and the endpoint's query log (GET /log?since=K) gains no entry, so nothing
# was sent to ClickHouse.  Real invocations (one completed, one failed) and
# real routes are the fixtures.  Target topology refusals need I/O by
# nature and are covered by test/t/040_admission.t.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(drop_roles pg_literal);
use DpwinEndpoint qw(sockets_accepted);

my $tag = "t080_$$";
my $db = $tag;
my $schema = $tag;
my $srv = "${tag}_ch";
my $gone_srv = "${tag}_gone";
my ($owner, $other, $nobody, $nosel, $nousage) =
  map { "dpwin_t080_$_" } qw(owner other nobody nosel nousage);
my @roles = ($owner, $other, $nobody, $nosel, $nousage);
my $end = '2026-09-09 00:00:00+00';

# ---- fixtures -------------------------------------------------------------

drop_roles(@roles);
ch_ok("DROP DATABASE IF EXISTS `$db`");
ch_ok("CREATE DATABASE `$db` ENGINE = Atomic");
ch_ok("CREATE TABLE `$db`.`ev` (id Int64, observed_at Nullable(DateTime64(6, 'UTC')), note Nullable(String)) ENGINE = MergeTree ORDER BY id");

my $pw = pg_literal($ENV{DPWIN_CH_PASSWORD});
my $user = pg_literal($ENV{DPWIN_CH_USER});
psql_ok(<<"SQL");
DROP SCHEMA IF EXISTS $schema CASCADE;
DROP SERVER IF EXISTS $srv CASCADE;
DROP SERVER IF EXISTS $gone_srv CASCADE;
CREATE ROLE $owner; CREATE ROLE $other; CREATE ROLE $nobody; CREATE ROLE $nosel; CREATE ROLE $nousage;
GRANT dpwin_operator TO $owner, $other, $nosel, $nousage;
CREATE SERVER $srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}');
CREATE SERVER $gone_srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}');
GRANT USAGE ON FOREIGN SERVER $srv TO $owner, $other, $nosel;
GRANT USAGE ON FOREIGN SERVER $gone_srv TO $owner;
CREATE USER MAPPING FOR PUBLIC SERVER $srv OPTIONS (user $user, password $pw);
CREATE SCHEMA $schema;
GRANT USAGE ON SCHEMA $schema TO PUBLIC;
CREATE TABLE $schema.ev (id bigint NOT NULL, observed_at timestamptz, note text);
INSERT INTO $schema.ev SELECT g, timestamptz '2026-09-01 00:00:00+00' + g * interval '1 hour', 'n' || g
  FROM generate_series(1, 300) g;
GRANT SELECT ON $schema.ev TO $owner, $other, $nousage;
GRANT SELECT (id, observed_at) ON $schema.ev TO $nosel;
CREATE FUNCTION $schema.evidence(uuid, jsonb) RETURNS void LANGUAGE sql AS '';
SET ROLE $owner;
SELECT dpwin.create_route('${tag}_r', '$schema.ev', 'observed_at', '$srv', '$db', 'ev',
	'7 days', '1 day');
SELECT dpwin.create_route('${tag}_r2', '$schema.ev', 'observed_at', '$srv', '$db', 'missing',
	'1 day', '1 hour');
SELECT dpwin.create_route('${tag}_ev', '$schema.ev', 'observed_at', '$srv', '$db', 'ev_e',
	'1 day', '1 day', evidence_function => '$schema.evidence(uuid,jsonb)');
SELECT dpwin.create_route('${tag}_gone', '$schema.ev', 'observed_at', '$gone_srv', '$db', 'gone',
	'1 day', '1 day');
RESET ROLE;
DROP SERVER $gone_srv;
SQL

# A completed invocation of the route and a failed one (its target table
# does not exist), both made by the owner.
my ($done) = split /\|/, psql_ok("SET ROLE $owner; SELECT invocation_id, state FROM dpwin_refresh('${tag}_r', '$end')");
is(psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$done'"), 'completed',
	'fixture: a completed invocation');
like(psql_err("SET ROLE $owner; SELECT * FROM dpwin_refresh('${tag}_r2', '$end')") // 'ok',
	qr/^42P01: /, 'fixture: a refresh of a missing target fails');
my $failed = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '${tag}_r2'");
is(psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$failed'"), 'failed',
	'fixture: a failed invocation');
my $ninv = psql_ok("SELECT count(*) FROM dpwin.invocation");
my $nlease = psql_ok("SELECT count(*) FROM dpwin.lease");

# ---- the catalogue ----------------------------------------------------------

my $R = "'${tag}_r'";
my @cases = (
	# label, role (undef: superuser), SQL, SQLSTATE, message pattern
	[ 'refresh: NULL route', $owner, "SELECT * FROM dpwin_refresh(NULL, '$end')", '22004', qr/route must not be NULL/ ],
	[ 'refresh: NULL interval_end', $owner, "SELECT * FROM dpwin_refresh($R, NULL)", '22004', qr/interval_end must not be NULL/ ],
	[ 'refresh: infinity', $owner, "SELECT * FROM dpwin_refresh($R, 'infinity')", '22008', qr/interval_end must be finite/ ],
	[ 'refresh: -infinity', $owner, "SELECT * FROM dpwin.refresh($R, '-infinity')", '22008', qr/interval_end must be finite/ ],
	[ 'refresh: timestamp without time zone', $owner, "SELECT * FROM dpwin_refresh($R, '2026-09-09 00:00:00'::timestamp)", '42804', qr/not timestamp without time zone/ ],
	[ 'refresh: localtimestamp', $owner, "SELECT * FROM dpwin.refresh($R, localtimestamp)", '42804', qr/not timestamp without time zone/ ],
	[ 'refresh: date', $owner, "SELECT * FROM dpwin_refresh($R, current_date)", '42804', qr/not date/ ],
	[ 'refresh: text', $owner, "SELECT * FROM dpwin_refresh($R, '2026-09-09'::text)", '42883', qr/does not exist/ ],
	[ 'refresh: window before the timestamp range', $owner, "SELECT * FROM dpwin_refresh($R, '4714-11-24 00:00:00+00 BC')", '22008', qr/before the earliest timestamp/ ],
	[ 'refresh: window at the end of the timestamp range', $owner, "SELECT * FROM dpwin_refresh($R, '294276-12-31 23:59:59+00')", '22008', qr/outside the range of ClickHouse DateTime64/ ],
	[ 'refresh: window starting before 1900', $owner, "SELECT * FROM dpwin_refresh($R, '1900-01-07 23:59:59.999999+00')", '22008', qr/\[1899-12-31T23:59:59\.999999Z, .* outside the range/ ],
	[ 'refresh: window ending after 2299', $owner, "SELECT * FROM dpwin_refresh($R, '2300-01-01 00:00:00.000001+00')", '22008', qr/outside the range/ ],
	[ 'refresh: unknown route', $owner, "SELECT * FROM dpwin_refresh('${tag}_nosuch', '$end')", '42704', qr/route "${tag}_nosuch" does not exist/ ],
	[ 'refresh: route name with an injection', $owner, "SELECT * FROM dpwin_refresh('x''; DROP TABLE $schema.ev; --', '$end')", '42704', qr/does not exist/ ],
	[ 'refresh: malformed invocation id', $owner, "SELECT * FROM dpwin.refresh($R, '$end', 'not-a-uuid')", '22P02', qr/invalid input syntax for type uuid/ ],
	[ 'refresh: invocation of another interval_end', $owner, "SELECT * FROM dpwin.refresh($R, '2026-09-10 00:00:00+00', '$done')", '22023', qr/belongs to another route or interval_end/ ],
	[ 'refresh: invocation of another route', $owner, "SELECT * FROM dpwin.refresh('${tag}_ev', '$end', '$done')", '22023', qr/belongs to another route or interval_end/ ],
	[ 'refresh: rerun of a failed invocation', $owner, "SELECT * FROM dpwin.refresh('${tag}_r2', '$end', '$failed')", '55000', qr/is failed and has nothing to recover/ ],
	[ 'refresh: rerun of another owner\'s invocation', $other, "SELECT * FROM dpwin.refresh($R, '$end', '$done')", '42501', qr/must be owner of route "${tag}_r" to recover it/ ],
	[ 'refresh: not an operator', $nobody, "SELECT * FROM dpwin_refresh($R, '$end')", '42501', qr/permission denied for function dpwin_refresh/ ],
	[ 'refresh: no SELECT on a column', $nosel, "SELECT * FROM dpwin_refresh($R, '$end')", '42501', qr/permission denied to refresh route/ ],
	[ 'refresh: no USAGE on the server', $nousage, "SELECT * FROM dpwin_refresh($R, '$end')", '42501', qr/permission denied to refresh route/ ],
	[ 'refresh: server dropped', $owner, "SELECT * FROM dpwin_refresh('${tag}_gone', '$end')", '42704', qr/server "$gone_srv" does not exist/ ],
	[ 'recover: NULL', $owner, "SELECT * FROM dpwin.recover(NULL)", '22004', qr/invocation must not be NULL/ ],
	[ 'recover: unknown', $owner, "SELECT * FROM dpwin.recover(gen_random_uuid())", '42704', qr/dpwin invocation \S+ does not exist/ ],
	[ 'recover: failed invocation', $owner, "SELECT * FROM dpwin.recover('$failed')", '55000', qr/is failed and has nothing to recover/ ],
	[ 'recover: not the owner', $other, "SELECT * FROM dpwin.recover('$done')", '42501', qr/must be owner of route/ ],
	[ 'recover: not an operator', $nobody, "SELECT * FROM dpwin.recover('$done')", '42501', qr/permission denied for function recover/ ],
	[ 'abandon: NULL', $owner, "SELECT * FROM dpwin.abandon(NULL)", '22004', qr/invocation must not be NULL/ ],
	[ 'abandon: unknown', $owner, "SELECT * FROM dpwin.abandon(gen_random_uuid())", '42704', qr/does not exist/ ],
	[ 'abandon: completed invocation', $owner, "SELECT * FROM dpwin.abandon('$done')", '55000', qr/has a publication intent and cannot be abandoned/ ],
	[ 'abandon: not the owner', $other, "SELECT * FROM dpwin.abandon('$failed')", '42501', qr/must be owner of route/ ],
	[ 'reconcile: unknown', $owner, "SELECT dpwin.reconcile(gen_random_uuid())", '42704', qr/does not exist/ ],
	[ 'reconcile: not the owner', $other, "SELECT dpwin.reconcile('$done')", '42501', qr/must be owner of route/ ],
	[ 'drop_backups: negative keep', $owner, "SELECT * FROM dpwin.drop_backups($R, -1)", '22023', qr/keep must be zero or more, not -1/ ],
	[ 'drop_backups: NULL keep', $owner, "SELECT * FROM dpwin.drop_backups($R, NULL)", '22004', qr/must not be NULL/ ],
	[ 'drop_backups: unknown route', $owner, "SELECT * FROM dpwin.drop_backups('${tag}_nosuch', 1)", '42704', qr/does not exist/ ],
	[ 'drop_backups: not the owner', $other, "SELECT * FROM dpwin.drop_backups($R, 0)", '42501', qr/must be owner of route/ ],
	[ 'lock_target: NULL server', $owner, "SELECT dpwin.lock_target(NULL, '$db', 'ev')", '22004', qr/must not be NULL/ ],
	[ 'lock_target: empty database', $owner, "SELECT dpwin.lock_target('$srv', '', 'ev')", '42602', qr/must not be empty/ ],
	[ 'lock_target: unknown server', $owner, "SELECT dpwin.lock_target('${tag}_nosuch', '$db', 'ev')", '42704', qr/does not exist/ ],
	[ 'lock_target: server of another wrapper', undef, "SELECT dpwin.lock_target('${tag}_other', '$db', 'ev')", '42809', qr/does not use the dpwin_clickhouse foreign-data wrapper/ ],
	[ 'lock_target: no USAGE on the server', $nousage, "SELECT dpwin.lock_target('$srv', '$db', 'ev')", '42501', qr/permission denied for foreign server/ ],
	[ 'create_route: injection in the route name', $owner, "SELECT dpwin.create_route('x''; DROP TABLE $schema.ev; --', '$schema.ev', 'observed_at', '$srv', '$db', 'x', '1 day', '1 hour')", '42602', qr/invalid route name/ ],
	[ 'alter_route: not the owner', $other, "SELECT dpwin.alter_route($R, parallelism => 2)", '42501', qr/must be owner of route/ ],
);

psql_ok("CREATE FOREIGN DATA WRAPPER ${tag}_fdw; CREATE SERVER ${tag}_other FOREIGN DATA WRAPPER ${tag}_fdw");

# Evidence function and row-level security changes that the route must
# notice at refresh time, each restored afterwards.
my @stateful = (
	[ 'refresh: row-level security on the source', $other, "SELECT * FROM dpwin_refresh($R, '$end')", '42501', qr/permission denied to refresh route/,
	  "ALTER TABLE $schema.ev ENABLE ROW LEVEL SECURITY; CREATE POLICY p ON $schema.ev USING (id > 0)",
	  "DROP POLICY p ON $schema.ev; ALTER TABLE $schema.ev DISABLE ROW LEVEL SECURITY" ],
	[ 'refresh: EXECUTE on the evidence function revoked', $other, "SELECT * FROM dpwin_refresh('${tag}_ev', '$end')", '42501', qr/permission denied to refresh route/,
	  "REVOKE EXECUTE ON FUNCTION $schema.evidence(uuid, jsonb) FROM PUBLIC",
	  "GRANT EXECUTE ON FUNCTION $schema.evidence(uuid, jsonb) TO PUBLIC" ],
	[ 'refresh: source column changed type', $owner, "SELECT * FROM dpwin_refresh($R, '$end')", '55000', qr/changed since the route was declared/,
	  "ALTER TABLE $schema.ev ALTER COLUMN note TYPE varchar(40)",
	  "ALTER TABLE $schema.ev ALTER COLUMN note TYPE text" ],
	[ 'refresh: not an operator, EXECUTE granted', $nobody, "SELECT * FROM dpwin_refresh($R, '$end')", '42501', qr/permission denied to refresh route/,
	  "GRANT EXECUTE ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid) TO $nobody",
	  "REVOKE EXECUTE ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid) FROM $nobody" ],
);

my $clean = 0;    # cases refused with their SQLSTATE and no socket opened

sub no_io
{
	my ($label, $role, $sql, $state, $re) = @_;
	my $seq = ch_log_seq();
	my $sockets = sockets_accepted();
	my $full = ($role ? "SET ROLE $role;\n" : '') . $sql;
	my $err = psql_err($full) // 'no error';
	my $ok = like($err, qr/^\Q$state\E: .*$re/, "$label: $state") or diag("got: $err");
	my @sent = ch_log_since($seq);
	$ok &= is(scalar(@sent), 0, "$label: nothing sent to ClickHouse")
	  or diag(join("\n", map { "  $_->{query}" } @sent));
	$ok &= is(sockets_accepted() - $sockets, 0, "$label: no connection opened to ClickHouse");
	$clean++ if $ok;
}

for my $c (@cases)
{
	no_io(@$c);
}
for my $c (@stateful)
{
	my ($label, $role, $sql, $state, $re, $before, $after) = @$c;
	psql_ok($before);
	no_io($label, $role, $sql, $state, $re);
	psql_ok($after);
}

my $ncases = @cases + @stateful;
is($clean, $ncases, "every one of the $ncases bad inputs was refused before any I/O");

# Nothing was journaled either: no new invocation, no new lease row.
is(psql_ok("SELECT count(*) FROM dpwin.invocation"), $ninv, 'no invocation was registered by any refused call');
is(psql_ok("SELECT count(*) FROM dpwin.lease"), $nlease, 'no lease row was added by any refused call');
is(psql_ok("SELECT to_regclass('$schema.ev') IS NOT NULL"), 't', 'the source table is still there');

# The log does see I/O: the same helper notices a call that talks to
# ClickHouse (a read-only reconcile).
{
	my $seq = ch_log_seq();
	my $sockets = sockets_accepted();
	psql_ok("SET ROLE $owner; SELECT dpwin.reconcile('$done')");
	my @sent = ch_log_since($seq);
	cmp_ok(scalar(@sent), '>', 0, 'control: a reconcile is visible in the query log');
	cmp_ok(sockets_accepted() - $sockets, '>', 0, 'control: and it opened a connection');
}

# ---- clean up ------------------------------------------------------------------

drop_roles(@roles);
psql_ok("DROP SCHEMA $schema CASCADE; DROP SERVER $srv CASCADE;
	DROP SERVER ${tag}_other; DROP FOREIGN DATA WRAPPER ${tag}_fdw;
	DELETE FROM dpwin.lease WHERE server_name IN ('$srv', '$gone_srv')");
ch_ok("DROP DATABASE IF EXISTS `$db`");

done_testing();
