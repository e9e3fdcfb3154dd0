# Security: privileges and secrets.
#
# * A role without SELECT on the source (or on one of the route's columns)
#   cannot extract it through dpwin: the refresh fails with 42501 and
#   nothing reaches ClickHouse.
# * A role without dpwin_operator cannot refresh, even with EXECUTE.
# * A non-owner cannot alter, drop, recover, abandon, reconcile or drop the
#   backups of another owner's route: 42501 each.
# * The passwords of user mappings (the real one and a distinctive wrong
#   one that makes ClickHouse answer 28000) never appear in any dpwin table
#   or view, in a refresh's result (details jsonb), in an error (message,
#   detail, hint, context), in pg_stat_activity while a refresh runs, in
#   the PostgreSQL server log, or in the endpoint's query log; a ClickHouse
#   error that echoes the password is scrubbed.
use strict;
use warnings;
use Test::More;
use IPC::Run qw(start finish timeout);
use DpwinTest;
use DpwinFixture qw(drop_roles pg_literal);
use DpwinEndpoint qw(release sockets_accepted);

my $tag = "t083_$$";
my $db = $tag;
my $schema = $tag;
my $srv = "${tag}_ch";
my $bad_srv = "${tag}_badpw";
my $route = "${tag}_r";
my $bad_route = "${tag}_badpw_r";
my ($owner, $other, $nosel, $nocol, $nobody) = map { "dpwin_t083_$_" } qw(owner other nosel nocol nobody);
my @roles = ($owner, $other, $nosel, $nocol, $nobody);
my $end = '2026-09-09 00:00:00+00';
my $real_pw = $ENV{DPWIN_CH_PASSWORD};
my $wrong_pw = "Wr0ng-t083-$$-" . join('', map { ('a' .. 'z', 0 .. 9)[ int(rand(36)) ] } 1 .. 16);
my @secrets = ($real_pw, $wrong_pw);

my $log_file = sandbox_root() . '/run/postgresql.log';
ok(-r $log_file, "the server log $log_file is readable");
my $log_start = -s $log_file;
my $ch_start = ch_log_seq();

# Every text a test looked at, to be searched for the passwords at the end.
my @seen;

sub as_role { my ($role, $sql) = @_; return ($role ? "SET ROLE $role;\n" : '') . $sql; }

# Run $sql as $role expecting failure; keep psql's whole stderr (message,
# detail, hint, context) for the secret scan; return "SQLSTATE: message".
sub fails
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\n\\set SHOW_CONTEXT always\n" . as_role($role, $sql));
	push @seen, $out, $err;
	return 'no error' unless $rc;
	my ($state, $msg) = $err =~ /ERROR:\s+([0-9A-Z]{5}):\s+(.*)/;
	return defined $state ? "$state: $msg" : $err;
}

sub no_io_fails
{
	my ($label, $role, $sql, $state, $re) = @_;
	my $seq = ch_log_seq();
	my $sockets = sockets_accepted();
	like(fails($role, $sql), qr/^\Q$state\E: .*$re/, "$label: $state");
	my @sent = ch_log_since($seq);
	is(scalar(@sent), 0, "$label: nothing sent to ClickHouse") or diag(join("\n", map { $_->{query} } @sent));
	is(sockets_accepted() - $sockets, 0, "$label: no connection opened to ClickHouse");
}

# ---- fixtures -----------------------------------------------------------------

drop_roles(@roles);
ch_ok("DROP DATABASE IF EXISTS `$db`");
ch_ok("CREATE DATABASE `$db` ENGINE = Atomic");
for my $t ('ev', 'ev_bad')
{
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, observed_at Nullable(DateTime64(6, 'UTC')), note Nullable(String), secret_note Nullable(String)) ENGINE = MergeTree ORDER BY id");
}

psql_ok("DROP SCHEMA IF EXISTS $schema CASCADE;
	DROP SERVER IF EXISTS $srv CASCADE;
	DROP SERVER IF EXISTS $bad_srv CASCADE;
	CREATE ROLE $owner; CREATE ROLE $other; CREATE ROLE $nosel; CREATE ROLE $nocol; CREATE ROLE $nobody;
	GRANT dpwin_operator TO $owner, $other, $nosel, $nocol;
	CREATE SERVER $srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}');
	CREATE SERVER $bad_srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}');
	GRANT USAGE ON FOREIGN SERVER $srv, $bad_srv TO $owner, $other, $nosel, $nocol, $nobody;
	CREATE SCHEMA $schema;
	GRANT USAGE ON SCHEMA $schema TO PUBLIC;
	CREATE TABLE $schema.ev (id bigint NOT NULL, observed_at timestamptz, note text, secret_note text);
	INSERT INTO $schema.ev SELECT g, timestamptz '2026-09-01 00:00:00+00' + g * interval '1 hour', 'n' || g, 'confidential ' || g
	  FROM generate_series(1, 300) g;
	GRANT SELECT ON $schema.ev TO $owner, $other;
	GRANT SELECT (id, observed_at, note) ON $schema.ev TO $nocol;");
# the mappings, each in a statement of its own that succeeds (PostgreSQL
# itself would log a failing statement with its text)
psql_ok("CREATE USER MAPPING FOR PUBLIC SERVER $srv OPTIONS (user " . pg_literal($ENV{DPWIN_CH_REFRESH_USER}) . ", password " . pg_literal($real_pw) . ")");
psql_ok("CREATE USER MAPPING FOR PUBLIC SERVER $bad_srv OPTIONS (user " . pg_literal($ENV{DPWIN_CH_USER}) . ", password " . pg_literal($wrong_pw) . ")");
psql_ok(as_role($owner, "SELECT dpwin.create_route('$route', '$schema.ev', 'observed_at', '$srv', '$db', 'ev', '7 days', '1 day', parallelism => 2);
	SELECT dpwin.create_route('$bad_route', '$schema.ev', 'observed_at', '$bad_srv', '$db', 'ev_bad', '7 days', '1 day')"));

# ---- who may extract ---------------------------------------------------------------

no_io_fails('no SELECT on the source', $nosel, "SELECT * FROM dpwin_refresh('$route', '$end')",
	'42501', qr/permission denied to refresh route "$route"/);
like($seen[-1], qr/DETAIL:\s+No SELECT privilege on column "id"/, '... the detail names the first column without SELECT');
no_io_fails('no SELECT on one column of the route', $nocol, "SELECT * FROM dpwin_refresh('$route', '$end')",
	'42501', qr/permission denied to refresh route/);
like($seen[-1], qr/DETAIL:\s+No SELECT privilege on column "secret_note"/, '... the detail names secret_note');
no_io_fails('not an operator', $nobody, "SELECT * FROM dpwin_refresh('$route', '$end')",
	'42501', qr/permission denied for function dpwin_refresh/);
psql_ok("GRANT EXECUTE ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid), dpwin.refresh(text, timestamptz, uuid) TO $nobody");
no_io_fails('not an operator, EXECUTE granted', $nobody, "SELECT * FROM dpwin.refresh('$route', '$end')",
	'42501', qr/permission denied to refresh route/);
like($seen[-1], qr/Only members of dpwin_operator can refresh routes/, '... because only operators may');
psql_ok("REVOKE EXECUTE ON FUNCTION public.dpwin_refresh(text, timestamptz, uuid), dpwin.refresh(text, timestamptz, uuid) FROM $nobody");
# the owner loses SELECT after declaring the route
psql_ok("REVOKE SELECT ON $schema.ev FROM $owner");
no_io_fails('the owner without SELECT any more', $owner, "SELECT * FROM dpwin_refresh('$route', '$end')",
	'42501', qr/permission denied to refresh route/);
psql_ok("GRANT SELECT ON $schema.ev TO $owner");
is(ch_ok("SELECT count() FROM `$db`.`ev`"), "0\n", 'the target received no row from any refused refresh');

# ---- a refresh that runs, watched in pg_stat_activity ---------------------------------

# The first staging INSERT is held on the server, so that the workers are
# there to be seen; it is released once they were.
ch_control('POST', '/fault?pattern=INSERT&count=1&mode=hold');
my ($out, $err) = ('', '');
my $sql = as_role($owner, "SELECT state || '|' || invocation_id || '|' || details::text FROM dpwin_refresh('$route', '$end')");
# (the statement goes in -c: a started psql would wait for a piped stdin
# until finish() pumps it)
my $h = start([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c', $sql ],
	'<', \undef, '>', \$out, '2>', \$err, timeout(120));
my $activity = '';
my $saw_workers = wait_until(sub {
		my $a = psql_ok("SELECT string_agg(a::text, E'\\n') FROM pg_stat_activity a WHERE backend_type LIKE 'dpwin%'");
		$activity .= "$a\n";
		return $a =~ /dpwin chunk worker/;
	}, 60);
# and a few more samples while the chunks load
for (1 .. 5)
{
	$activity .= psql_ok("SELECT string_agg(a::text, E'\\n') FROM pg_stat_activity a") . "\n";
}
is(release('INSERT'), 1, 'the held INSERT is released');
finish($h);
ch_control('POST', '/faults/clear');
push @seen, $out, $err, $activity;
ok($saw_workers, 'the coordinator and its chunk workers were seen in pg_stat_activity');
my ($state, $inv, $details) = split /\|/, $out, 3;
is($state, 'completed', 'the owner\'s refresh completed') or diag($err);
like($details // '', qr/"source_rows": 168/, 'its details carry the evidence');

# ---- non-owners ----------------------------------------------------------------------------

# a failed invocation of the owner: a fault fails the admission
ch_control('POST', '/fault?pattern=system.tables&count=50&mode=error&code=241');
like(fails($owner, "SELECT * FROM dpwin_refresh('$route', '2026-09-10 00:00:00+00')"), qr/^HV000: ClickHouse error 241/,
	'a refresh failing on a ClickHouse error (241) fails with HV000');
ch_control('POST', '/faults/clear');
my $failed = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$route' AND state = 'failed'");
like($failed, qr/^[0-9a-f-]{36}$/, 'the owner has a failed invocation');

for my $c (
	[ 'alter_route', "SELECT dpwin.alter_route('$route', parallelism => 3)", qr/must be owner of route "$route" to alter it/ ],
	[ 'drop_route', "SELECT dpwin.drop_route('$route')", qr/must be owner of route "$route" to drop it/ ],
	[ 'recover', "SELECT * FROM dpwin.recover('$inv')", qr/must be owner of route "$route" to recover it/ ],
	[ 'recover through dpwin_refresh', "SELECT * FROM dpwin.refresh('$route', '$end', '$inv')", qr/must be owner of route "$route" to recover it/ ],
	[ 'abandon', "SELECT * FROM dpwin.abandon('$failed')", qr/must be owner of route "$route" to abandon it/ ],
	[ 'reconcile', "SELECT dpwin.reconcile('$inv')", qr/must be owner of route "$route" to reconcile it/ ],
	[ 'drop_backups', "SELECT * FROM dpwin.drop_backups('$route', 0)", qr/must be owner of route "$route" to drop backups of it/ ],
  )
{
	no_io_fails("a non-owner cannot $c->[0]", $other, $c->[1], '42501', $c->[2]);
}
is(psql_ok("SELECT parallelism FROM dpwin.routes WHERE route_name = '$route'"), 2, 'the route is unchanged');
is(psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$failed'"), 'failed', 'the failed invocation is not abandoned');
is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db' AND name LIKE '_dpwin_backup_%'"), "1\n", 'the backup is still there');
# an operator who is not the owner may still refresh (with SELECT)
is((split /\|/, psql_ok(as_role($other, "SELECT state FROM dpwin_refresh('$route', '$end')")))[0], 'completed',
	'another operator with SELECT may refresh the route');

# ---- failures with secrets around ----------------------------------------------------------

# wrong password: ClickHouse refuses the credentials
my $e = fails($owner, "SELECT * FROM dpwin_refresh('$bad_route', '$end')");
like($e, qr/^28000: ClickHouse server "$bad_srv" rejected the credentials/, 'a wrong password fails with 28000');
like($seen[-1], qr/HINT:.*user mapping/i, '... with a hint about the user mapping');
like(fails($owner, "SELECT dpwin.reconcile(invocation_id) FROM dpwin.invocations WHERE route_name = '$bad_route'"),
	qr/^28000: /, 'reconcile with the wrong password fails with 28000 too');
# a chunk that fails on the server after its retries
ch_control('POST', '/fault?pattern=INSERT&count=50&mode=error&code=1002');
like(fails($owner, "SELECT * FROM dpwin_refresh('$route', '2026-09-11 00:00:00+00')"),
	qr/^HV000: ClickHouse error 1002 while /, 'a refresh whose inserts fail, fails with the server\'s error (HV000)');
ch_control('POST', '/faults/clear');
# a lost reply
ch_control('POST', '/fault?pattern=INSERT&count=50&mode=lost');
like(fails($owner, "SELECT * FROM dpwin_refresh('$route', '2026-09-12 00:00:00+00')"),
	qr/^08006: lost the connection to ClickHouse server /, 'a refresh whose inserts lose their replies, fails with 08006');
ch_control('POST', '/faults/clear');
# A ClickHouse error that quotes the password back is scrubbed.  The
# statement itself carries the password (on purpose, and only here): its
# lines are left out of the scans below by their marker.
my $marker = "echo-marker-$$";
{
	my $echo = "SELECT throwIf(1, '$marker: ' || '$real_pw')";
	my ($rc, $o, $x) = psql("\\set VERBOSITY verbose\n" . "SELECT dpwin_test.ch_query('$srv', " . pg_literal($echo) . ")");
	like($x, qr/ERROR:\s+HV000: ClickHouse error 395/, 'a ClickHouse error that quotes the password is reported');
	my ($detail) = $x =~ /^DETAIL:\s+(.*)$/m;
	like($detail // '', qr/\Q$marker\E: \*{8}/, '... and its detail shows ******** where the password was');
	unlike($detail // '', qr/\Q$real_pw\E/, '... not the password');
}

# ---- where the passwords must not be ---------------------------------------------------------

# every dpwin table and view, as text
my $catalog = psql_ok(<<'SQL');
SELECT string_agg(format('SELECT %L || '':'' || t::text FROM %I.%I t', c.relname, n.nspname, c.relname), ' UNION ALL ')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dpwin' AND c.relkind IN ('r', 'v')
SQL
my $dump = psql_ok("SELECT string_agg(x, E'\\n') FROM ($catalog) s(x)");
cmp_ok(length($dump), '>', 1000, 'the dpwin catalog dump has content (' . length($dump) . ' bytes)');
like($dump, qr/rejected the credentials/, '... including the journaled authentication failure');

my $server_log = do {
	open my $fh, '<', $log_file or die "cannot read $log_file: $!";
	seek($fh, $log_start, 0);
	local $/;
	<$fh>;
};
like($server_log, qr/rejected the credentials/, 'the server log has the authentication failure');
my $ch_log = join("\n", map { "$_->{query_id} $_->{status} $_->{query}" } ch_log_since($ch_start));
like($ch_log, qr/\b403\b/, 'the endpoint logged the refused authentication');
my $results = psql_ok("SELECT string_agg(COALESCE(result::text, '') || COALESCE(error, ''), E'\\n') FROM dpwin.invocation i JOIN dpwin.route r USING (route_id) WHERE r.route_name IN ('$route', '$bad_route')");

my %places = (
	'dpwin tables and views' => $dump,
	'refresh results and journaled errors' => $results . $details,
	'errors returned to the client' => join("\n", grep { defined } @seen),
	'pg_stat_activity during a refresh' => $activity,
	'the PostgreSQL server log' => $server_log,
	'the endpoint query log' => $ch_log,
);
for my $place (sort keys %places)
{
	for my $i (0 .. $#secrets)
	{
		my $text = join("\n", grep { !/\Q$marker\E/ } split /\n/, $places{$place});
		unlike($text, qr/\Q$secrets[$i]\E/, ($i ? 'the wrong' : 'the real') . " password is not in $place");
	}
}

# ---- clean up ----------------------------------------------------------------------------------

drop_roles(@roles);
psql_ok("DROP SCHEMA $schema CASCADE; DROP SERVER $srv CASCADE; DROP SERVER $bad_srv CASCADE;
	DELETE FROM dpwin.lease WHERE server_name IN ('$srv', '$bad_srv')");
ch_ok("DROP DATABASE IF EXISTS `$db`");

done_testing();
