# Recovery with dpwin.recover(), dpwin.abandon() and dpwin.reconcile()
# after the coordinator died (SIGKILL: the postmaster restarts the whole
# cluster, as after any backend crash) or after a publication whose outcome
# could not be read:
#   - killed while its EXCHANGE runs: a fresh invocation is refused,
#     recover() finds the exchange by UUIDs and finishes, no second EXCHANGE;
#   - the UUIDs match neither side: unknown, everything kept, until repaired;
#   - the exchange did not run and its outcome was not read: recover()
#     retries it exactly once, unless the target changed meanwhile;
#   - killed while extracting: snapshot_expired;
#   - killed while building: recover() publishes the staged chunks without
#     extracting again; or abandon() drops them.
# Every data check compares the full multiset of rows.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault fresh_fixture drop_fixture new_event_route create_event_source ch_rows uuid_of
  after_refresh new_uuid route_id invocation_prefix generation_name own_tables exchange_re exchanges bg_psql refresh_row_sql
  wait_logged hold_source release_source workers_held);
use DpwinCrash qw(crash crash_in_request coordinator_pid state_of);
use DpwinEndpoint qw(release wait_running);

my $db = "t062_$$";
my $schema = "t062_$$";
my $E = '2026-09-09 00:00:00+00';

# Wait until $inv reaches $state, then until its coordinator waits for the
# answer to the statement that the endpoint holds back (one answered since
# $seq matching $after first, if given), SIGKILL it, and wait for the
# cluster to come back from crash recovery.
sub kill_in_request
{
	my ($inv, $state, $h, $label, %o) = @_;
	ok(wait_until(sub { state_of($inv) eq $state }, 60), "$label: the invocation reached $state");
	my $pid = coordinator_pid($inv);
	like($pid, qr/^\d+$/, "$label: its coordinator holds the lease");
	crash_in_request($pid, $inv, $h, $label, %o);
}

# The checks after a recovery that published: target = new generation, the
# backup = the old table, journal and evidence complete.
sub check_published
{
	my ($label, $route, $t, $inv, $pre, $pre_uuid) = @_;
	is_deeply(ch_rows($t), after_refresh($pre, $E), "$label: the target is the new generation");
	my ($before, $gen_uuid, $outcome, $backup) = split /\|/,
	  psql_ok("SELECT target_uuid_before, generation_uuid, outcome, backup_table"
		  . " FROM dpwin.publication WHERE invocation_id = '$inv'");
	is($before, $pre_uuid, "$label: the intent recorded the old target");
	is(uuid_of($t), $gen_uuid, "$label: target UUID = generation UUID");
	is($outcome, 'published', "$label: outcome published");
	is(uuid_of($backup), $pre_uuid, "$label: the old table is the backup");
	is_deeply(ch_rows($backup), $pre, "$label: the backup holds the old rows");
	is(state_of($inv), 'completed', "$label: completed");
	is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$inv'"), 1, "$label: evidence written");
	is(psql_ok("SELECT invocation_id FROM dpwin.route_state WHERE route_id = " . route_id($route)), $inv,
		"$label: route_state advanced");
	is_deeply(own_tables($route, $inv), [], "$label: staging tables dropped");
}

# --- setup ---------------------------------------------------------------

ch_control('POST', '/faults/clear');
fresh_fixture($db, $schema);
create_event_source(rows => 111, step => '13 minutes 0.25 seconds', mod => 5);

# --- killed while its EXCHANGE runs -----------------------------------------------

# A fresh route whose refresh is killed while the endpoint holds its
# EXCHANGE; waits until that EXCHANGE has run all the same.  Returns the
# route, the table, the invocation, and the target's rows and UUID before.
sub killed_in_exchange
{
	my ($tag, $label, $ran) = @_;
	my ($route, $t) = new_event_route($tag);
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $inv = new_uuid();
	my $seq = ch_log_seq();
	fault(pattern => "EXCHANGE TABLES `$db`.`$t` AND", mode => 'hold', count => 1);
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_running(qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$t\E` AND/, 1, phase => 'holding'),
		"$label: the EXCHANGE waits on the server");
	kill_in_request($inv, 'publishing', $h, $label, seq => $seq);
	# The dead coordinator's EXCHANGE still runs on the server.
	is(release("EXCHANGE TABLES `$db`.`$t` AND"), 1, "$label: the EXCHANGE is released after the crash");
	ok(wait_logged($seq, exchange_re($t), answered => 1), "$label: $ran");
	return ($route, $t, $inv, $pre, $pre_uuid);
}

{
	my ($route, $t, $inv, $pre, $pre_uuid) = killed_in_exchange('xkill', 'killed in EXCHANGE', 'the EXCHANGE ran anyway');
	is(state_of($inv), 'publishing', 'killed in EXCHANGE: the journal says publishing');
	is(psql_ok("SELECT coalesce(outcome, 'none') FROM dpwin.publication WHERE invocation_id = '$inv'"), 'none',
		'killed in EXCHANGE: outcome not observed');

	my ($rc, $out, $err) = psql(refresh_row_sql($route, $E));
	like($err, qr/ERROR:\s+invocation \Q$inv\E of this target has an unsettled publication/,
		'killed in EXCHANGE: a fresh invocation is refused, naming the older one');
	like($err, qr/HINT:\s+Settle it first: SELECT \* FROM dpwin\.recover\('\Q$inv\E'\);/,
		'killed in EXCHANGE: the hint is the recover call');
	like(psql_err(refresh_row_sql($route, $E)), qr/^55006: invocation \Q$inv\E of this target has an unsettled publication/,
		'killed in EXCHANGE: SQLSTATE 55006');
	is(psql_ok("SELECT reconcile->>'verdict' FROM dpwin.reconcile('$inv')"), 'published',
		'killed in EXCHANGE: reconcile reads the UUIDs: published');

	my $seq = ch_log_seq();
	my ($id, $state) = split /\|/, psql_ok("SELECT invocation_id, state FROM dpwin.recover('$inv')");
	is($state, 'completed', 'killed in EXCHANGE: recover completes');
	is(scalar(exchanges($seq, $t)), 0, 'killed in EXCHANGE: recover ran no second EXCHANGE');
	is(scalar(grep { $_->{query} =~ /FORMAT RowBinary|^INSERT INTO/ } ch_log_since($seq)), 0,
		'killed in EXCHANGE: recover loaded nothing');
	check_published('killed in EXCHANGE', $route, $t, $inv, $pre, $pre_uuid);
}

# --- the UUIDs match neither side: unknown ---------------------------------------

{
	my ($route, $t, $inv, $pre, $pre_uuid) = killed_in_exchange('unk', 'unknown', 'the EXCHANGE ran');

	# Someone else swaps another table in before recovery.
	ch_ok("CREATE TABLE `$db`.`decoy` AS `$db`.`$t`");
	my $decoy_uuid = uuid_of('decoy');
	ch_ok("EXCHANGE TABLES `$db`.`$t` AND `$db`.`decoy`");
	my $gen = generation_name($route, $inv);
	my %before = map { $_ => uuid_of($_) } ($t, 'decoy', $gen);

	my $seq = ch_log_seq();
	my $err = psql_err("SELECT * FROM dpwin.recover('$inv')");
	like($err, qr/^08007: publication outcome of invocation \Q$inv\E is unknown/, 'unknown: recover reports it');
	is(state_of($inv), 'unknown', 'unknown: state unknown');
	is(psql_ok("SELECT outcome FROM dpwin.publication WHERE invocation_id = '$inv'"), 'unknown',
		'unknown: outcome unknown');
	like(psql_err("SELECT * FROM dpwin.recover('$inv')"), qr/^08007: publication outcome of invocation \Q$inv\E is unknown/,
		'unknown: recover again reports it again');
	is_deeply({ map { $_ => uuid_of($_) } ($t, 'decoy', $gen) }, \%before, 'unknown: every table is kept as it is');
	ok(scalar(@{ own_tables($route, $inv) }) >= 3, 'unknown: staging tables kept');
	is(scalar(exchanges($seq, $t)), 0, 'unknown: no EXCHANGE');
	my $rep = psql_ok("SELECT (r->>'verdict') || ' ' || (r->>'target_uuid_now') FROM dpwin.reconcile('$inv') r");
	is($rep, "unknown $decoy_uuid", 'unknown: reconcile shows the foreign UUID in the target');
	like(psql_err(refresh_row_sql($route, $E)), qr/^55006: invocation \Q$inv\E of this target has an unsettled publication/,
		'unknown: a fresh invocation is refused');
	like(psql_err("SELECT * FROM dpwin.abandon('$inv')"), qr/^55000: invocation \Q$inv\E has a publication intent and cannot be abandoned/,
		'unknown: abandon is refused');

	# Repaired by hand: the generation back in place.
	ch_ok("EXCHANGE TABLES `$db`.`$t` AND `$db`.`decoy`");
	$seq = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', 'unknown: recover after the repair completes');
	is(scalar(exchanges($seq, $t)), 0, 'unknown: without an EXCHANGE');
	check_published('unknown, repaired', $route, $t, $inv, $pre, $pre_uuid);
	ch_ok("DROP TABLE `$db`.`decoy`");
}

# --- the exchange did not run and its outcome was not read -------------------------

# The EXCHANGE fails before running and the first UUID read-back fails too:
# the coordinator stops in publishing without an observed outcome.
sub stuck_in_publishing
{
	my ($route, $t, $inv, $label) = @_;
	fault(pattern => "EXCHANGE TABLES `$db`.`$t` AND", mode => 'error', code => 241, count => 1);
	fault(pattern => "SELECT name, toString(uuid) FROM system.tables WHERE database = '$db' AND name IN ('$t', ",
		mode => 'error', code => 241, count => 1);
	my ($rc, $out, $err) = psql(refresh_row_sql($route, $E, $inv));
	like($err, qr/HINT:.*dpwin\.recover\('\Q$inv\E'\)/, "$label: the refresh fails, its hint is the recover call");
	is(state_of($inv), 'publishing', "$label: left publishing");
	like(psql_err(refresh_row_sql($route, $E)), qr/^55006: invocation \Q$inv\E/, "$label: a fresh invocation is refused");
	is(psql_ok("SELECT reconcile->>'verdict' FROM dpwin.reconcile('$inv')"), 'not_published',
		"$label: reconcile: not_published");
}

{
	my ($route, $t) = new_event_route('retry');
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $inv = new_uuid();
	my $seq0 = ch_log_seq();
	stuck_in_publishing($route, $t, $inv, 'retry');
	# A transient ClickHouse error while recovery re-admits the target
	# settles nothing: the invocation stays publishing for another try.
	fault(pattern => "FROM system.databases WHERE name = '$db'", mode => 'error', code => 241, count => 1);
	like(psql_err("SELECT * FROM dpwin.recover('$inv')"), qr/^HV000: ClickHouse error 241/,
		'retry: a transient error during recovery fails the call');
	is(psql_ok("SELECT state || ' ' || coalesce(publication_outcome, 'none') FROM dpwin.invocations"
		  . " WHERE invocation_id = '$inv'"), 'publishing none', 'retry: and leaves it publishing');
	my $seq = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', 'retry: recover completes');
	my @x = exchanges($seq, $t);
	is(scalar(@x), 1, 'retry: recover ran exactly one EXCHANGE');
	is($x[0]{status}, '200', 'retry: and it succeeded');
	is_deeply([ map { $_->{status} } exchanges($seq0, $t) ], [ '500', '200' ],
		'retry: one failed EXCHANGE, one that ran: never two that ran');
	check_published('retry', $route, $t, $inv, $pre, $pre_uuid);
}

for my $case ([ 'rows', "INSERT INTO `$db`.`%s` VALUES (88, '2026-07-01 00:00:00', 'written meanwhile')",
		qr/^55000: target `\Q$db\E`\.`tgt_rows` changed outside the window between generation build and publication/ ],
	[ 'schema', "ALTER TABLE `$db`.`%s` ADD INDEX v_idx v TYPE bloom_filter GRANULARITY 1",
		qr/^55000: the schema of target `\Q$db\E`\.`tgt_schema` changed between generation build and publication/ ],
	[ 'column', "ALTER TABLE `$db`.`%s` ADD COLUMN extra Nullable(Int32)",
		qr/^42804: ClickHouse target `\Q$db\E`\.`tgt_column` has 4 columns/ ])
{
	my ($tag, $change, $re) = @$case;
	my ($route, $t) = new_event_route($tag);
	my $inv = new_uuid();
	stuck_in_publishing($route, $t, $inv, "changed before retry ($tag)");
	ch_ok(sprintf($change, $t));
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $create = ch_ok("SELECT create_table_query FROM system.tables WHERE database = '$db' AND name = '$t'");
	my $seq = ch_log_seq();
	like(psql_err("SELECT * FROM dpwin.recover('$inv')"), $re, "changed before retry ($tag): recover refuses");
	is(scalar(exchanges($seq, $t)), 0, "changed before retry ($tag): no EXCHANGE");
	is_deeply(ch_rows($t), $pre, "changed before retry ($tag): the changed target is kept");
	is(uuid_of($t), $pre_uuid, "changed before retry ($tag): same table");
	is(ch_ok("SELECT create_table_query FROM system.tables WHERE database = '$db' AND name = '$t'"), $create,
		"changed before retry ($tag): same definition");
	is(psql_ok("SELECT state || ' ' || publication_outcome FROM dpwin.invocations WHERE invocation_id = '$inv'"),
		'failed not_published', "changed before retry ($tag): failed, not published");
	is_deeply(own_tables($route, $inv), [], "changed before retry ($tag): the stale generation and staging dropped");
	if ($tag eq 'column')
	{
		# settled, so no longer blocking: a fresh refresh is admitted or not on its own
		like(psql_err(refresh_row_sql($route, $E)), qr/^42804: ClickHouse target .* has 4 columns/,
			"changed before retry ($tag): a fresh refresh is not blocked, and refused by admission");
		next;
	}
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E')"), 'completed',
		"changed before retry ($tag): a fresh refresh completes");
	is_deeply(ch_rows($t), after_refresh($pre, $E), "changed before retry ($tag): and publishes over the changed target");
}

# An unknown publication repaired by hand to the state before the exchange:
# recover() treats it as not published and retries the exchange once.
{
	my ($route, $t) = new_event_route('unk2');
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $inv = new_uuid();
	stuck_in_publishing($route, $t, $inv, 'unknown, undone');
	ch_ok("CREATE TABLE `$db`.`decoy2` AS `$db`.`$t`");
	ch_ok("EXCHANGE TABLES `$db`.`$t` AND `$db`.`decoy2`");
	like(psql_err("SELECT * FROM dpwin.recover('$inv')"), qr/^08007:/, 'unknown, undone: unknown');
	is(state_of($inv), 'unknown', 'unknown, undone: state unknown');
	ch_ok("EXCHANGE TABLES `$db`.`$t` AND `$db`.`decoy2`");
	is(psql_ok("SELECT reconcile->>'verdict' FROM dpwin.reconcile('$inv')"), 'not_published',
		'unknown, undone: reconcile: not_published after the repair');
	my $seq = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', 'unknown, undone: recover completes');
	is_deeply([ map { $_->{status} } exchanges($seq, $t) ], ['200'], 'unknown, undone: with exactly one EXCHANGE');
	check_published('unknown, undone', $route, $t, $inv, $pre, $pre_uuid);
	ch_ok("DROP TABLE `$db`.`decoy2`");
}

# --- killed while extracting: the snapshot is gone ------------------------------------

{
	my ($route, $t) = new_event_route('xtr');
	my $pre = ch_rows($t);
	my $inv = new_uuid();
	# Killed with both workers inside a chunk (the source barrier).
	my $barrier = hold_source("$schema.src", 'src_w');
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	is(scalar(workers_held($inv, 2)), 2, 'killed extracting: both workers are inside a chunk');
	is(state_of($inv), 'extracting', 'killed extracting: the invocation is extracting');
	crash([ coordinator_pid($inv) ], $h, 'killed extracting', 'the coordinator');
	release_source($barrier);
	my $err = psql_err("SELECT * FROM dpwin.recover('$inv')");
	like($err, qr/^55000: invocation \Q$inv\E cannot be recovered: its snapshot expired before publication/,
		'killed extracting: recover says the snapshot expired');
	is(state_of($inv), 'snapshot_expired', 'killed extracting: snapshot_expired');
	# The workers, released from the barrier, notice their coordinator's
	# end and fence their chunks; once none of them runs, nothing of the
	# invocation is left.
	ok(wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity a JOIN dpwin.chunk c ON a.pid = c.worker_pid"
					  . " WHERE c.invocation_id = '$inv' AND a.backend_type = 'dpwin chunk worker'") == 0 }, 120),
		'killed extracting: its workers end');
	ok(wait_until(sub { !@{ own_tables($route, $inv) } }, 60), 'killed extracting: its staging tables are dropped');
	is_deeply(ch_rows($t), $pre, 'killed extracting: target untouched');
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E')"), 'completed',
		'killed extracting: a new invocation re-extracts and completes');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'killed extracting: and publishes the window');
}

# --- killed while building: recover publishes the staged chunks, or abandon --------------

for my $how ('recover', 'abandon')
{
	my ($route, $t) = new_event_route("bld_$how");
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $inv = new_uuid();
	my $label = "killed building, $how";
	my $gen = generation_name($route, $inv);
	my $seq0 = ch_log_seq();
	# Hold the ATTACH of the staged parts (it names a partition id, then a
	# staging table), in state verified.
	my $staged = "' FROM `$db`.`" . invocation_prefix(route_id($route), $inv) . 'stg_';
	fault(pattern => $staged, mode => 'hold', count => 1);
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	# Killed while it waits on that ATTACH, the generation cloned.
	ok(wait_running(qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s, 1, phase => 'holding'),
		"$label: the ATTACH of the staged parts waits on the server");
	kill_in_request($inv, 'verified', $h, $label, seq => $seq0, after => qr/^CREATE TABLE `\Q$db\E`\.`\Q$gen\E`/);
	is(release($staged), 1, "$label: the ATTACH is released after the crash");
	# The dead coordinator's attach still runs on the server; let it end.
	ok(wait_logged($seq0, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s, answered => 1),
		"$label: its last statement has ended");
	my $chunks = psql_ok("SELECT string_agg(chunk_no || ':' || attempt || ':' || state || ':' || staging_table || ':' || finished_at, ','"
		  . " ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$inv'");
	is(psql_ok("SELECT count(*) FILTER (WHERE state = 'verified') || '/' || count(*) FROM dpwin.chunk WHERE invocation_id = '$inv'"),
		'4/4', "$label: every chunk was staged and verified");
	# the name rule the tests derive (DpwinFixture::invocation_prefix) is
	# the one dpwin follows
	my $prefix = invocation_prefix(route_id($route), $inv);
	is(psql_ok("SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '$inv' AND left(staging_table, length('$prefix')) = '$prefix'"),
		4, "$label: the journal names every staging table with the prefix $prefix");
	my $seq = ch_log_seq();
	if ($how eq 'recover')
	{
		is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', "$label: completes");
		my @log = ch_log_since($seq);
		is(scalar(grep { $_->{query} =~ /FORMAT RowBinary|_stg_\d+_\d+` AS/ } @log), 0,
			"$label: no extraction, no new staging table");
		is(scalar(exchanges($seq, $t)), 1, "$label: one EXCHANGE");
		is(psql_ok("SELECT string_agg(chunk_no || ':' || attempt || ':' || state || ':' || staging_table || ':' || finished_at, ','"
			  . " ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$inv'"), $chunks,
			"$label: the chunk journal is unchanged");
		check_published($label, $route, $t, $inv, $pre, $pre_uuid);
	}
	else
	{
		ok(scalar(@{ own_tables($route, $inv) }) >= 4, "$label: staging tables are there");
		is(psql_ok("SELECT state FROM dpwin.abandon('$inv')"), 'abandoned', "$label: abandoned");
		is(state_of($inv), 'abandoned', "$label: journaled");
		is_deeply(own_tables($route, $inv), [], "$label: staging and generation tables dropped");
		is(scalar(exchanges($seq, $t)), 0, "$label: no EXCHANGE");
		is_deeply(ch_rows($t), $pre, "$label: target untouched");
		is(uuid_of($t), $pre_uuid, "$label: same table");
	}
}

# --- clean up -------------------------------------------------------------

ch_control('POST', '/faults/clear');
drop_fixture();

done_testing();
