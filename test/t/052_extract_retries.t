# Transient chunk failures against the real engine (faults injected by the
# endpoint on one chunk's staging INSERT):
#
# * one 5xx error: the attempt is fenced (its staging table dropped before
#   the next one is created), the chunk is retried and verified at attempt
#   1, the data is exact; the same for a 5xx on the statement creating the
#   staging table and on the one digesting it;
# * the error on every attempt (more than the two retries): the invocation
#   fails, the caller gets the ClickHouse error, the state is failed, the
#   target is untouched (same UUID, same rows) and no staging or
#   generation table is left;
# * a lost reply after the INSERT ran: the old statement is settled, the
#   chunk is retried into a fresh staging table, the data is exact with no
#   duplicates;
# * the caller cancelled during extraction: the invocation fails as
#   cancelled, workers stop, staging tables are dropped, the target is
#   untouched.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture pg_row_sql ch_row_sql sorted_lines multiset_is fault uuid_of
  invocation_prefix dpwin_tables_left cluster_processes bg_psql bg_finish hold_source release_source workers_held);

my $tag = "t052_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';
my $route = "${tag}_r";
my $src = "$schema.src";
my $tgt = "`$db`.`tgt`";

my $lo = '2026-05-01 00:00:00+00';
my $hi = '2026-05-02 00:00:00+00';
my $ch_in = "w >= toDateTime64('2026-05-01 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-05-02 00:00:00', 6, 'UTC')";

my $pg_row = pg_row_sql();
my $ch_row = ch_row_sql();

sub src_window { return sorted_lines(psql_ok("SELECT $pg_row FROM $src WHERE w >= '$lo' AND w < '$hi'")); }
sub tgt_rows { my ($where) = @_; return sorted_lines(ch_ok("SELECT $ch_row FROM $tgt WHERE $where")); }

# Faults are aimed at one invocation's own tables: the test chooses the
# invocation id of the next refresh, so that the staging table names are
# known in advance and no other test's statements can match.
my $route_id;
my $next;

sub next_invocation { $next = psql_ok("SELECT gen_random_uuid()"); return $next; }

sub table_prefix { return invocation_prefix($route_id, $_[0]); }

# the staging INSERT (and only it) of chunk $c, attempt $a, of the next refresh
sub insert_pattern
{
	my ($c, $a) = @_;
	return table_prefix($next // next_invocation()) . "stg_${c}_${a}` (";
}

# Processes of this sandbox's postmaster whose title names the invocation
# (its coordinator and chunk workers).
sub invocation_processes
{
	my ($inv) = @_;
	return scalar(keys %{ cluster_processes(qr/\Q$inv\E/) });
}

sub refresh
{
	my $inv = $next // next_invocation();
	undef $next;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\nSELECT state, invocation_id FROM dpwin_refresh('$route', '$hi', '$inv')");
	my ($state, $id) = split /\|/, $out;
	return ($rc, $state, $id // $inv, $err);
}

# ---- setup ---------------------------------------------------------------

fresh_fixture($db, $schema);
ch_ok("CREATE TABLE $tgt (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String),"
	  . " n Nullable(Decimal(12, 2))) ENGINE = MergeTree ORDER BY id");
psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz, v text, n numeric(12,2));
	INSERT INTO $src SELECT g, timestamptz '$lo' - interval '1 hour' + g * interval '13 seconds',
		'row ' || g || CASE WHEN g % 5 = 0 THEN E'\\n\\n' ELSE 'ü' END, (g * 0.25)::numeric(12,2)
	  FROM generate_series(0, 7199) g;
	INSERT INTO $src SELECT * FROM $src WHERE id % 20 = 0;
	INSERT INTO $src SELECT g, NULL, 'null window', g FROM generate_series(9000, 9004) g;
	CREATE INDEX src_w ON $src (w);");
$route_id = psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', 'tgt',
	interval '1 day', interval '3 hours', parallelism => 2)");

# A first refresh fills the target; the others must replace its window.
my $exp = src_window();
my ($rc, $state, $id) = refresh();
is($state, 'completed', 'initial refresh completed');
multiset_is(tgt_rows($ch_in), $exp, 'initial refresh: the window is exact');
psql_ok("UPDATE $src SET v = v || ' (2)' WHERE id % 3 = 0");
$exp = src_window();

# ---- one transient error ---------------------------------------------------

{
	my $seq = ch_log_seq();
	fault(pattern => insert_pattern(3, 0), count => 1, mode => 'error', code => 1000);
	($rc, $state, $id) = refresh();
	is($state, 'completed', 'one 5xx error on a staging INSERT: the refresh completes');
	is(psql_ok("SELECT attempt || ' ' || state || ' ' || (staging_table LIKE '%\\_stg\\_3\\_1')::text FROM dpwin.chunks"
		  . " WHERE invocation_id = '$id' AND chunk_no = 3"), '1 verified true',
		'the chunk journal shows chunk 3 verified at attempt 1, in its own staging table');
	is(psql_ok("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$id' AND attempt = 0 AND state = 'verified'"),
		7, 'the other chunks verified at attempt 0');
	is(psql_ok("SELECT (SELECT m->>'attempts' FROM jsonb_array_elements(metrics->'chunk_metrics') m"
		  . " WHERE (m->>'chunk_no')::int = 3) FROM dpwin.evidence WHERE invocation_id = '$id'"),
		2, 'evidence: chunk 3 took 2 attempts');
	multiset_is(tgt_rows($ch_in), $exp, 'the window is exact');

	# The fence: the failed INSERT, then its staging table dropped, and only
	# then the new attempt's staging table created.
	my @log = ch_log_since($seq);
	my $t = table_prefix($id);
	my ($ins) = grep { $log[$_]{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$t\Estg_3_0` \(/s } 0 .. $#log;
	my ($drop) = grep { $log[$_]{query} =~ /^DROP TABLE IF EXISTS `\Q$db\E`\.`\Q$t\Estg_3_0`$/ && $_ > ($ins // 1e9) } 0 .. $#log;
	my ($create) = grep { $log[$_]{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q$t\Estg_3_1` AS/ } 0 .. $#log;
	ok(defined $ins && $log[$ins]{status} eq '500', 'attempt 0 of chunk 3 got the injected 500');
	ok(defined $drop && defined $create && $drop < $create,
		'the failed attempt was fenced (its staging table dropped) before attempt 1 started');
	is(dpwin_tables_left(), 0, 'no staging or generation tables left');
}

# ---- a 5xx on the other statements of an attempt ---------------------------

# (the pattern of the digest also matches an ATTACH ... FROM a staging
# table: the log shows which statement got the fault)
for my $case (
	[ 'creating the staging table', sub { insert_pattern(4, 0) =~ s/\($/AS/r }, qr/^CREATE TABLE / ],
	[ 'digesting a staging table', sub { "FROM `$db`.`" . table_prefix(next_invocation()) . 'stg_' },
		qr/^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed\(/ ])
{
	my ($what, $pattern_of, $faulted_re) = @$case;
	my $pattern = $pattern_of->();
	psql_ok("UPDATE $src SET n = n + 1 WHERE id % 11 = 0");
	$exp = src_window();
	my $seq = ch_log_seq();
	fault(pattern => $pattern, count => 1, mode => 'error', code => 1000);
	($rc, $state, $id) = refresh();
	is($state, 'completed', "a 5xx while $what: the refresh completes");
	my @faulted = grep { $_->{status} eq '500' } ch_log_since($seq);
	is(scalar(@faulted), 1, "... one statement got the 5xx");
	like($faulted[0]{query} // '', $faulted_re, "... and it was the one $what");
	is(psql_ok("SELECT string_agg(attempt::text, ' ' ORDER BY attempt) FROM dpwin.chunks"
		  . " WHERE invocation_id = '$id' AND state = 'verified'"), '0 0 0 0 0 0 0 1',
		"... the chunk is retried once, the others are not");
	multiset_is(tgt_rows($ch_in), $exp, '... and the window is exact');
	is(dpwin_tables_left(), 0, '... with no staging or generation tables left');
}

# ---- the error on every attempt -------------------------------------------

{
	psql_ok("UPDATE $src SET v = v || ' (3)' WHERE id % 7 = 0");
	my $uuid = uuid_of('tgt');
	my $before = tgt_rows('1');
	my $seq = ch_log_seq();
	fault(pattern => insert_pattern(5, $_), count => 1, mode => 'error', code => 1000) for 0 .. 2;
	my $err;
	($rc, $state, $id, $err) = refresh();
	isnt($rc, 0, 'the error on all three attempts fails the refresh');
	like($err, qr/ERROR:\s+HV000: ClickHouse error 1000 while inserting rows of chunk 5/,
		'the caller gets the ClickHouse error (SQLSTATE HV000), naming the chunk');
	like($err, qr/DETAIL:\s+injected fault/, "... and the server's message in the detail");
	my $inv = $id;
	is(psql_ok("SELECT state, error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"), 'failed|HV000',
		'the invocation is failed with SQLSTATE HV000');
	is(psql_ok("SELECT attempt, state FROM dpwin.chunks WHERE invocation_id = '$inv' AND chunk_no = 5"), '2|failed',
		'chunk 5 failed at attempt 2 (two retries, no more)');
	my $t = table_prefix($id);
	my @ins = grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$t\Estg_5_\d` \(/s } ch_log_since($seq);
	is(scalar(@ins), 3, 'three INSERT attempts were made for chunk 5');
	is(uuid_of('tgt'), $uuid, 'the target is the same table (UUID unchanged)');
	multiset_is(tgt_rows('1'), $before, 'the target rows are untouched');
	is(dpwin_tables_left(), 0, 'no staging or generation tables left');
	is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db' AND (name LIKE '%\\_stg\\_%' OR name LIKE '%\\_gen')") + 0,
		0, '... by name in system.tables either');
}

# ---- a lost reply ------------------------------------------------------------

{
	my $seq = ch_log_seq();
	$exp = src_window();
	fault(pattern => insert_pattern(6, 0), count => 1, mode => 'lost');
	($rc, $state, $id) = refresh();
	is($state, 'completed', 'a lost reply on a staging INSERT: the refresh completes');
	is(psql_ok("SELECT attempt, state FROM dpwin.chunks WHERE invocation_id = '$id' AND chunk_no = 6"), '1|verified',
		'chunk 6 verified at attempt 1');
	my @log = ch_log_since($seq);
	my $t = table_prefix($id);
	ok((grep { $_->{status} eq 'lost' && $_->{query} =~ /\Q$t\Estg_6_0` / } @log),
		'the endpoint ran the INSERT and dropped the reply');
	ok((grep { $_->{query} =~ /system\.processes/ && $_->{query} =~ /\Q$id\E.*-ins-/ } @log),
		'the lost statement was settled (looked up in system.processes)');
	multiset_is(tgt_rows($ch_in), $exp, 'the window is exact: no duplicates from the lost attempt');
	is(psql_ok("SELECT sum(rows) FROM dpwin.chunks WHERE invocation_id = '$id'"), scalar(@$exp),
		'the journal counts each row once');
	is(dpwin_tables_left(), 0, 'no staging or generation tables left');
}

# ---- the caller is cancelled during extraction ---------------------------------

{
	my $uuid = uuid_of('tgt');
	my $before = tgt_rows('1');
	my $inv = next_invocation();
	undef $next;
	# Both workers are held inside a chunk (the source barrier) when the
	# caller is cancelled.
	my $barrier = hold_source($src, 'src_w');
	my $h = bg_psql("SELECT state FROM dpwin_refresh('$route', '$hi', '$inv')", 'dpwin_t052_caller');
	is(scalar(workers_held($inv, 2)), 2, 'extraction is under way: both workers are inside a chunk');
	cmp_ok(invocation_processes($inv), '>=', 3, 'its coordinator and both workers are running');
	is(psql_ok("SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity"
		  . " WHERE application_name = 'dpwin_t052_caller' AND backend_type = 'client backend'"), 1,
		'the caller is cancelled');
	my ($crc, $cout, $err) = bg_finish($h);
	release_source($barrier);
	like($err, qr/ERROR:\s+57014: canceling statement due to user request/, 'the caller gets 57014');
	ok(wait_until(sub {
		psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$inv'") eq 'failed'
	}, 30), 'the invocation is failed');
	is(psql_ok("SELECT error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"), '57014',
		'... as cancelled (57014)');
	ok(wait_until(sub { invocation_processes($inv) == 0 }, 30),
		'the coordinator and its workers are gone');
	is(psql_ok("SELECT count(*) FROM dpwin.progress WHERE invocation_id = '$inv'"), 0,
		'... and its progress slot is free');
	ok(wait_until(sub { dpwin_tables_left() == 0 }, 10), 'no staging or generation tables left');
	is(uuid_of('tgt'), $uuid, 'the target is the same table');
	multiset_is(tgt_rows('1'), $before, 'the target rows are untouched');

	# and the route refreshes normally afterwards
	$exp = src_window();
	($rc, $state, $id) = refresh();
	is($state, 'completed', 'the next refresh completes');
	multiset_is(tgt_rows($ch_in), $exp, '... with an exact window');
}

# ---- clean up ------------------------------------------------------------------

psql_ok("SELECT dpwin.drop_route('$route')");
drop_fixture();

done_testing();
