# Refreshes as a least-privileged ClickHouse user: the account
# dpwin_refresh holds exactly the grants docs/admission.md lists (SHOW ROW
# POLICIES, and SELECT, INSERT, CREATE TABLE, DROP TABLE, ALTER DELETE and ALTER UPDATE
# on the target databases), dpwin_refresh_noshow the same without SHOW
# ROW POLICIES (test/ch_config.sh; the endpoint runs each account's
# statements with its role, docs/endpoint.md "Accounts").
#   - the accounts are narrowed: a CREATE DATABASE is denied;
#   - a refresh of an unpartitioned and of a partitioned target (whose
#     partitions outside the window are attached to the new generation)
#     completes, each statement sent by the least-privileged account;
#   - admission reads system.row_policies and refuses a table with a row
#     policy by naming the policy; without SHOW ROW POLICIES it falls back
#     to the query plan.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(pg_literal fresh_fixture drop_fixture drop_routes ch_rows after_refresh);
use DpwinEndpoint qw(log_entries);

my $db = "t105_$$";
my $lp = "t105_lp";
my $noshow = "t105_noshow";
my $pdb = 'dpwin_policy';	# the row policy's database, fixed by test/ch_config.sh
my $E = '2026-09-09 00:00:00+00';
my @routes;

sub make_server
{
	my ($name, $user) = @_;
	psql_ok("DROP SERVER IF EXISTS $name CASCADE;
		CREATE SERVER $name FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url " . pg_literal($ENV{DPWIN_CH_URL}) . ");
		CREATE USER MAPPING FOR CURRENT_USER SERVER $name
			OPTIONS (user " . pg_literal($user) . ", password " . pg_literal($ENV{DPWIN_CH_PASSWORD}) . ");");
}

sub route
{
	my ($server, $database, $table) = @_;
	my $name = unique_name('t105r');
	psql_ok("SELECT dpwin.create_route('$name', '$db.src'::regclass, 'w', '$server', '$database', '$table',"
		  . " interval '1 day', interval '6 hours', parallelism => 2)");
	push @routes, $name;
	return $name;
}

make_server($lp, 'dpwin_refresh');
make_server($noshow, 'dpwin_refresh_noshow');
fresh_fixture($db, $db);
psql_ok("CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz, v text);
	INSERT INTO $db.src
		SELECT g, timestamptz '2026-09-07 00:00:00+00' + g * interval '37 minutes 0.25 seconds', 'v ' || (g % 7)
		FROM generate_series(0, 150) g;
	INSERT INTO $db.src VALUES (900, '2026-09-08 06:00:00+00', 'dup'), (900, '2026-09-08 06:00:00+00', 'dup'),
		(901, NULL, 'null window');");

# --- the accounts are narrowed ------------------------------------------------------

{
	like(psql_err("SELECT dpwin_test.ch_query('$lp', 'CREATE DATABASE ${db}_denied')") // 'created',
		qr/^42501: ClickHouse error 497 /, 'dpwin_refresh may not CREATE DATABASE (ACCESS_DENIED)');
	is(psql_ok("SELECT rtrim(dpwin_test.ch_query('$lp', 'SELECT count() FROM system.row_policies WHERE database = ''$pdb'''), E'\\n')"),
		'1', 'dpwin_refresh reads system.row_policies');
	like(psql_err("SELECT dpwin_test.ch_query('$noshow', 'SELECT count() FROM system.row_policies')") // 'read',
		qr/^42501: ClickHouse error 497 /, 'dpwin_refresh_noshow may not read system.row_policies');
}

# --- refreshes --------------------------------------------------------------------

for my $case ([ 'plain', 'ENGINE = MergeTree ORDER BY id' ],
	[ 'partitioned', 'ENGINE = MergeTree PARTITION BY toYYYYMMDD(assumeNotNull(w)) ORDER BY id'
		  . ' SETTINGS allow_nullable_key = 1' ])
{
	my ($tag, $engine) = @$case;
	my $t = "tgt_$tag";
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) $engine");
	ch_ok("INSERT INTO `$db`.`$t` VALUES (1, '2026-09-01 00:00:00', 'before'), (1, '2026-09-01 00:00:00', 'before'),"
		  . " (2, '2026-09-08 10:00:00', 'old in window'), (3, '2026-09-20 00:00:00', 'after'),"
		  . " (4, NULL, 'null'), (4, NULL, 'null')");
	my $pre = ch_rows($t);
	my $r = route($lp, $db, $t);
	my $seq = ch_log_seq();
	my ($rc, $out, $err) = psql("SELECT state FROM dpwin_refresh('$r', '$E')");
	is("$rc $out", '0 completed', "$tag: the refresh as dpwin_refresh completes") or diag($err);
	my @mine = grep { $_->{query} =~ /\Q$db\E/ } log_entries($seq);
	is_deeply(ch_rows($t), after_refresh($pre, $E), "$tag: the target is the kept rows plus the source's window");
	ok(@mine > 5, "$tag: the refresh's statements reached the endpoint");
	my %users;
	$users{ $_->{user} }++ for @mine;
	is(join(',', sort keys %users), 'dpwin_refresh', "$tag: every one of them as dpwin_refresh");
	my $attached = grep { $_->{query} =~ /^ALTER TABLE .* ATTACH PARTITION ID '\d+' FROM `\Q$db\E`\.`\Q$t\E`/
		  && $_->{status} eq '200' } @mine;
	is($attached ? 'attached' : 'none', $tag eq 'partitioned' ? 'attached' : 'none',
		"$tag: " . ($tag eq 'partitioned' ? 'partitions outside the window were attached from the target'
			: 'nothing was attached from the target'));
}

# --- row policies -------------------------------------------------------------------

{
	ch_ok("DROP DATABASE IF EXISTS `$pdb`");
	ch_ok("CREATE DATABASE `$pdb` ENGINE = Atomic");
	create_policed_table();
	my $r = route($lp, $pdb, 'policed');
	like(psql_err("SELECT state FROM dpwin_refresh('$r', '$E')") // 'completed',
		qr/^55000: ClickHouse target `dpwin_policy`\.`policed` has row policies$/,
		'with SHOW ROW POLICIES, admission reads system.row_policies and refuses the table');
	like(full_error("SELECT state FROM dpwin_refresh('$r', '$E')"),
		qr/DETAIL:\s+Row policies: default ON dpwin_policy\.policed\./,
		'the refusal names the policy');
	my $r2 = route($noshow, $pdb, 'policed');
	like(psql_err("SELECT state FROM dpwin_refresh('$r2', '$E')") // 'completed',
		qr/^55000: ClickHouse target `dpwin_policy`\.`policed` has a row policy that filters dpwin's reads$/,
		'without SHOW ROW POLICIES, admission finds the policy in the query plan');
	ch_ok("DROP DATABASE `$pdb`");
}

sub create_policed_table
{
	ch_ok("CREATE TABLE `$pdb`.`policed` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
		  . " ENGINE = MergeTree ORDER BY id");
	ch_ok("INSERT INTO `$pdb`.`policed` VALUES (-1, '2026-09-08 01:00:00', 'hidden'), (1, '2026-09-08 02:00:00', 'seen')");
	is(ch_ok("SELECT count() FROM `$pdb`.`policed`"), "1\n", 'the configured row policy hides a row');
}

sub full_error
{
	my ($sql) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\n" . $sql);
	return $rc ? $err : '';
}

drop_routes(@routes);
drop_fixture();
psql_ok("DROP SERVER $lp CASCADE; DROP SERVER $noshow CASCADE;");
done_testing();
