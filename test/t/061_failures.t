# The failure table (docs/recovery.md), driven by the endpoint's fault
# injection, without killing processes (062_recovery.t kills):
#   - EXCHANGE reply lost: reconciled by UUIDs, exactly one EXCHANGE ran;
#   - EXCHANGE fails before running: not published, target untouched,
#     invocation failed, a fresh refresh works;
#   - target rows or schema changed between build and publication: refused,
#     the changed target kept, no EXCHANGE;
#   - evidence failing after publication: data visible, state published;
#     recovery finishes without a snapshot or re-extraction;
#   - abandon before and after a publication intent; reconcile reports;
#   - the clean-up's DROP after the publication: a lost reply is sent
#     again; a refusal leaves the window published, warns, and recover()
#     drops the tables;
#   - the EXCHANGE probe during the extraction: a failure that may pass is
#     asked again after it; not asked while the target is the route's last
#     generation, asked again once it was replaced; "EXCHANGE does not
#     work" fails at once.
# Every data check compares the full multiset of rows.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinEndpoint qw(release wait_running);
use DpwinFixture qw(fault fresh_fixture drop_fixture new_event_route create_event_source ch_rows uuid_of replace_by_copy
  after_refresh new_uuid route_id invocation_prefix generation_name own_tables exchanges bg_psql bg_finish
  refresh_row_sql invocation_field wait_logged);

my $db = "t061_$$";
my $schema = "t061_$$";
my $E = '2026-09-09 00:00:00+00';


# A new invocation id for $route, and the prefix of its tables.
sub new_invocation
{
	my ($route) = @_;
	my $inv = new_uuid();
	return ($inv, invocation_prefix(route_id($route), $inv));
}

# --- setup ---------------------------------------------------------------

ch_control('POST', '/faults/clear');
fresh_fixture($db, $schema);
create_event_source(rows => 85, step => '17 minutes 0.5 seconds');
psql_ok("CREATE TABLE $schema.ev_switch (fail boolean NOT NULL);
	INSERT INTO $schema.ev_switch VALUES (true);
	CREATE TABLE $schema.ev_log (invocation_id uuid, metrics jsonb);
	CREATE FUNCTION $schema.record_evidence(inv uuid, metrics jsonb) RETURNS void
		LANGUAGE plpgsql AS \$\$
		BEGIN
			IF (SELECT fail FROM $schema.ev_switch) THEN
				RAISE EXCEPTION 'evidence store unavailable';
			END IF;
			INSERT INTO $schema.ev_log VALUES (inv, metrics);
		END
		\$\$;");

# --- EXCHANGE reply lost -----------------------------------------------------

{
	my ($route, $t) = new_event_route('lost');
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $seq = ch_log_seq();
	fault(pattern => "EXCHANGE TABLES `$db`.`$t` AND", mode => 'lost', count => 1);
	my ($inv, $state) = split /\|/, psql_ok(refresh_row_sql($route, $E));
	is($state, 'completed', 'reply lost: the refresh completes');
	my @x = exchanges($seq, $t);
	is(scalar(@x), 1, 'reply lost: exactly one EXCHANGE reached the server');
	is($x[0]{status}, 'lost', 'reply lost: and its reply was lost');
	ok((grep { $_->{query} =~ /system\.tables WHERE database = '\Q$db\E' AND name IN \('\Q$t\E', / && $_->{seq} > $x[0]{seq} }
		  ch_log_since($seq)), 'reply lost: the target UUID was read back after the exchange');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'reply lost: the target is the new generation');
	my ($gen_uuid, $outcome, $backup) = split /\|/,
	  psql_ok("SELECT generation_uuid, outcome, backup_table FROM dpwin.publication WHERE invocation_id = '$inv'");
	is(uuid_of($t), $gen_uuid, 'reply lost: target UUID = generation UUID of the intent');
	is($outcome, 'published', 'reply lost: outcome published');
	is(uuid_of($backup), $pre_uuid, 'reply lost: the old table is the backup');
	is_deeply(ch_rows($backup), $pre, 'reply lost: the backup holds the old rows');

	my $rep = psql_ok("SELECT verdict || ' ' || (target_uuid_now = intent->>'generation_uuid')::text || ' '"
		  . " || (backup_table_uuid_now = intent->>'target_uuid_before')::text"
		  . " FROM (SELECT r->>'verdict' AS verdict, r->>'target_uuid_now' AS target_uuid_now,"
		  . " r->>'backup_table_uuid_now' AS backup_table_uuid_now, r->'intent' AS intent"
		  . " FROM dpwin.reconcile('$inv') r) s");
	is($rep, 'published true true', 'reconcile: published, target = generation UUID, backup = old target UUID');
}

# --- EXCHANGE fails before it runs -------------------------------------------

{
	my ($route, $t) = new_event_route('xerr');
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $seq = ch_log_seq();
	my $inv = new_uuid();
	fault(pattern => "EXCHANGE TABLES `$db`.`$t` AND", mode => 'error', code => 241, count => 1);
	my $err = psql_err(refresh_row_sql($route, $E, $inv));
	like($err, qr/^HV000: ClickHouse error 241 while exchanging/, 'EXCHANGE error: the refresh fails with the ClickHouse error')
	  or diag($err);
	my @x = exchanges($seq, $t);
	is(scalar(@x), 1, 'EXCHANGE error: one EXCHANGE was sent, none repeated');
	is($x[0]{status}, '500', 'EXCHANGE error: it failed');
	is_deeply(ch_rows($t), $pre, 'EXCHANGE error: target rows untouched');
	is(uuid_of($t), $pre_uuid, 'EXCHANGE error: target table untouched (UUID)');
	is(invocation_field($inv, 'state'), 'failed', 'EXCHANGE error: invocation failed');
	like(invocation_field($inv, "error_sqlstate || ' ' || error"), qr/^HV000 ClickHouse error 241 while exchanging/,
		'EXCHANGE error: the journal keeps the ClickHouse error');
	is(invocation_field($inv, 'publication_outcome'), 'not_published', 'EXCHANGE error: outcome not_published');
	is_deeply(own_tables($route, $inv), [], 'EXCHANGE error: staging and generation tables dropped');
	is(psql_ok("SELECT reconcile->>'verdict' FROM dpwin.reconcile('$inv')"), 'not_published',
		'EXCHANGE error: reconcile says not_published');
	like(psql_err("SELECT * FROM dpwin.recover('$inv')"), qr/^55000: .*failed and has nothing to recover/,
		'EXCHANGE error: nothing to recover');

	my ($inv2, $state) = split /\|/, psql_ok(refresh_row_sql($route, $E));
	is($state, 'completed', 'EXCHANGE error: a fresh refresh afterwards completes');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'EXCHANGE error: and publishes the window');
}

# --- target rows written between generation build and publication ------------

# The build clones the target into the generation, checks the clone's
# parts and counts the target's kept rows (on the window column), then
# deletes the window from the clone.  Holding that DELETE on the server
# lets a writer slip in after the clone was checked and before the
# pre-exchange check; the hold is released once the write is done.
# Returns the held statement's pattern.
sub hold_second_copy
{
	my ($gen) = @_;
	# (the window is deleted in a scratch table, <generation>_del)
	my $pattern = "DELETE FROM `$db`.`${gen}_del`";
	fault(pattern => $pattern, mode => 'hold', count => 1);
	return $pattern;
}

sub wait_build_check
{
	my ($seq, $t, $held) = @_;
	return wait_logged($seq, qr/countIf\(.*FROM `\Q$db\E`\.`\Q$t\E`/s)
	  && wait_running(qr/^\Q$held\E/, 1, phase => 'holding');
}

{
	my ($route, $t) = new_event_route('wrt');
	my $inv = new_uuid();
	my $pre_uuid = uuid_of($t);
	my $seq = ch_log_seq();
	my $held = hold_second_copy(generation_name($route, $inv));
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_build_check($seq, $t, $held), 'target written: the build checked the kept rows');
	ch_ok("INSERT INTO `$db`.`$t` VALUES (77, '2026-08-01 00:00:00', 'written by someone else')");
	is(release($held), 1, 'target written: the DELETE is released after the write');
	my $pre = ch_rows($t);
	my ($rc, $out, $err) = bg_finish($h);
	isnt($rc, 0, 'target written: the refresh fails');
	like($err, qr/ERROR:\s+55000: target `\Q$db\E`\.`\Q$t\E` changed outside the window between generation build and publication/,
		'target written: refused with SQLSTATE 55000') or diag($err);
	is(scalar(exchanges($seq, $t)), 0, 'target written: no EXCHANGE was sent');
	is_deeply(ch_rows($t), $pre, 'target written: the changed target is intact, with the new row');
	ok((grep { /^77\|/ } @$pre), 'target written: (the new row is there)');
	is(uuid_of($t), $pre_uuid, 'target written: same table');
	is(invocation_field($inv, "state || ' ' || error_sqlstate || ' ' || coalesce(publication_outcome, 'no intent')"),
		'failed 55000 no intent', 'target written: invocation failed before any intent');
	is_deeply(own_tables($route, $inv), [], 'target written: staging and generation tables dropped');
}

# --- schema changed between generation build and publication ------------------

# A new column fails the re-admission (type parity); a new skip index passes
# it but changes the schema fingerprint.  Both are refused.
for my $case ([ 'ddl', 'ADD COLUMN extra Nullable(Int32)' ],
	[ 'idx', 'ADD INDEX v_idx v TYPE bloom_filter GRANULARITY 1', undef ])
{
	my ($tag, $ddl) = @$case;
	my ($route, $t) = new_event_route($tag);
	my $inv = new_uuid();
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $seq = ch_log_seq();
	my $held = hold_second_copy(generation_name($route, $inv));
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_build_check($seq, $t, $held), "schema changed ($tag): the build checked the kept rows");
	# the change must meet the re-admission, not a chunk worker's copy
	ok(wait_until(sub { psql_ok("SELECT chunks > 0 AND chunks_verified = chunks FROM dpwin.invocations"
				  . " WHERE invocation_id = '$inv'") eq 't' }, 60),
		"schema changed ($tag): every chunk is verified");
	ch_ok("ALTER TABLE `$db`.`$t` $ddl");
	is(release($held), 1, "schema changed ($tag): the DELETE is released after the change");
	my $create = ch_ok("SELECT create_table_query FROM system.tables WHERE database = '$db' AND name = '$t'");
	my ($rc, $out, $err) = bg_finish($h);
	my $state = $tag eq 'ddl' ? '42804' : '55000';
	my $re = $tag eq 'ddl'
	  ? qr/ERROR:\s+42804: ClickHouse target `\Q$db\E`\.`\Q$t\E` has 4 columns, route "\Q$route\E" has 3/
	  : qr/ERROR:\s+55000: the schema of target `\Q$db\E`\.`\Q$t\E` changed while the generation was being built/;
	like($err, $re, "schema changed ($tag): refused with SQLSTATE $state") or diag($err);
	is(scalar(exchanges($seq, $t)), 0, "schema changed ($tag): no EXCHANGE was sent");
	is_deeply(ch_rows($t), $pre, "schema changed ($tag): target rows intact");
	is(uuid_of($t), $pre_uuid, "schema changed ($tag): same table");
	is(ch_ok("SELECT create_table_query FROM system.tables WHERE database = '$db' AND name = '$t'"), $create,
		"schema changed ($tag): the changed definition is kept");
	is(invocation_field($inv, "state || ' ' || error_sqlstate || ' ' || coalesce(publication_outcome, 'no intent')"),
		"failed $state no intent", "schema changed ($tag): invocation failed before any intent");
	is_deeply(own_tables($route, $inv), [], "schema changed ($tag): staging and generation tables dropped");
}

# --- evidence fails after publication -------------------------------------------

{
	my ($route, $t) = new_event_route('evid', evidence => "$schema.record_evidence(uuid,jsonb)");
	my $pre = ch_rows($t);
	my $pre_uuid = uuid_of($t);
	my $inv = new_uuid();
	my ($rc, $out, $err) = psql(refresh_row_sql($route, $E, $inv));
	isnt($rc, 0, 'evidence fails: dpwin_refresh errors');
	like($err, qr/evidence store unavailable/, 'evidence fails: with the evidence function\'s error');
	like($err, qr/HINT:.*dpwin\.recover\('\Q$inv\E'\)/, 'evidence fails: the hint names the recover call');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'evidence fails: the new generation is visible');
	my ($gen_uuid, $outcome, $backup) = split /\|/,
	  psql_ok("SELECT generation_uuid, outcome, backup_table FROM dpwin.publication WHERE invocation_id = '$inv'");
	is(uuid_of($t), $gen_uuid, 'evidence fails: target UUID = generation UUID');
	is($outcome, 'published', 'evidence fails: outcome published');
	is(invocation_field($inv, 'state'), 'published', 'evidence fails: invocation state published');
	is(psql_ok("SELECT count(*) FROM dpwin.route_state WHERE route_id = " . route_id($route)), 0,
		'evidence fails: route_state not advanced');
	is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$inv'"), 0,
		'evidence fails: no evidence row (it commits with the evidence function)');
	is(psql_ok("SELECT count(*) FROM $schema.ev_log"), 0, 'evidence fails: nothing recorded by the function');

	like(psql_err("SELECT * FROM dpwin.abandon('$inv')"), qr/^55000: .*has a publication intent and cannot be abandoned/,
		'evidence fails: abandon is refused after the intent');

	my $chunks = psql_ok("SELECT string_agg(chunk_no || ':' || attempt || ':' || state || ':' || started_at || ':' || finished_at, ',' ORDER BY chunk_no)"
		  . " FROM dpwin.chunk WHERE invocation_id = '$inv'");
	my $snapshot = invocation_field($inv, 'snapshot_id');
	psql_ok("UPDATE $schema.ev_switch SET fail = false");
	my $seq = ch_log_seq();
	my ($id, $state) = split /\|/, psql_ok("SELECT invocation_id, state FROM dpwin.recover('$inv')");
	is($state, 'completed', 'evidence fails: recover completes');
	my @log = ch_log_since($seq);
	is(scalar(grep { $_->{query} =~ /FORMAT RowBinary|^CREATE TABLE|^INSERT INTO|^EXCHANGE/ } @log), 0,
		'evidence fails: recover loads nothing, builds nothing, exchanges nothing');
	is(psql_ok("SELECT string_agg(chunk_no || ':' || attempt || ':' || state || ':' || started_at || ':' || finished_at, ',' ORDER BY chunk_no)"
		  . " FROM dpwin.chunk WHERE invocation_id = '$inv'"), $chunks,
		'evidence fails: no new chunk attempt');
	is(invocation_field($inv, 'snapshot_id'), $snapshot, 'evidence fails: no new snapshot');
	is(psql_ok("SELECT count(*) FROM $schema.ev_log WHERE invocation_id = '$inv'"), 1,
		'evidence fails: the evidence function recorded the invocation once');
	is(psql_ok("SELECT (metrics->>'target_rows')::int FROM dpwin.evidence WHERE invocation_id = '$inv'"),
		scalar(@{ after_refresh($pre, $E) }), 'evidence fails: evidence written with the target row count');
	is(psql_ok("SELECT last_interval_end = '$E' AND invocation_id = '$inv' FROM dpwin.route_state"
		  . " WHERE route_id = " . route_id($route)), 't', 'evidence fails: route_state advanced by recover');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'evidence fails: the target is unchanged by recover');
	is_deeply(ch_rows($backup), $pre, 'evidence fails: the backup holds the old rows');
	is(uuid_of($backup), $pre_uuid, 'evidence fails: the backup is the old table');
	is_deeply(own_tables($route, $inv), [], 'evidence fails: recover dropped the staging tables');
	is(psql_ok("SELECT count(*) FROM dpwin.recover('$inv')"), 1, 'evidence fails: recover again is harmless');
	is(psql_ok("SELECT count(*) FROM $schema.ev_log WHERE invocation_id = '$inv'"), 1,
		'evidence fails: and records no second evidence');
}

# --- abandon before any publication intent ----------------------------------------

{
	my ($route, $t) = new_event_route('aband');
	my $pre = ch_rows($t);
	my ($inv, $prefix) = new_invocation($route);
	my $gen = generation_name($route, $inv);
	# The build fails attaching the staged parts (the statement names a
	# partition id, then a staging table), and the clean-up cannot list the
	# tables: the invocation fails with its tables left behind.
	fault(pattern => "' FROM `$db`.`${prefix}stg_", mode => 'error', code => 241, count => 1);
	fault(pattern => "startsWith(name, '$prefix')", mode => 'error', code => 497, count => 1);
	like(psql_err(refresh_row_sql($route, $E, $inv)), qr/^HV000: ClickHouse error 241 while attaching partitions/,
		'abandon: the refresh failed in the build');
	is(invocation_field($inv, 'state'), 'failed', 'abandon: failed');
	my $left = own_tables($route, $inv);
	is(scalar(grep { /_stg_/ } @$left), 4, 'abandon: the four staging tables were left');
	ok((grep { $_ eq $gen } @$left), 'abandon: and the generation');
	my ($id, $state) = split /\|/, psql_ok("SELECT invocation_id, state FROM dpwin.abandon('$inv')");
	is($state, 'abandoned', 'abandon: abandoned');
	is(invocation_field($inv, 'state'), 'abandoned', 'abandon: journaled');
	is_deeply(own_tables($route, $inv), [], 'abandon: its staging and generation tables are dropped');
	is_deeply(ch_rows($t), $pre, 'abandon: target untouched');
	is(psql_ok("SELECT state FROM dpwin.abandon('$inv')"), 'abandoned', 'abandon: again is harmless');
	like(psql_err("SELECT * FROM dpwin.recover('$inv')"), qr/^55000: invocation \Q$inv\E is abandoned and has nothing to recover$/,
		'abandon: nothing to recover');
	is(psql_ok("SELECT reconcile->>'verdict' FROM dpwin.reconcile('$inv')"), 'no_intent',
		'abandon: reconcile says no_intent');

	my ($inv2, $st) = split /\|/, psql_ok(refresh_row_sql($route, $E));
	like(psql_err("SELECT * FROM dpwin.abandon('$inv2')"), qr/^55000: .*publication intent/,
		'abandon: refused for a completed (published) invocation');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'abandon: a later refresh publishes');
}

# --- the clean-up after the publication: reply lost, then refused -----------------

{
	my ($route, $t) = new_event_route('clean');
	my $pre = ch_rows($t);
	my ($inv, $prefix) = new_invocation($route);
	my $seq = ch_log_seq();
	# The staging tables are dropped beside the RENAME to the backup, then
	# the clean-up lists the invocation's tables and drops what is left in
	# one DROP.  The first DROP and the listing are closed unanswered: the
	# listing is sent again, finds the staging tables, and the clean-up's
	# DROP drops them.
	fault(pattern => "startsWith(name, '$prefix')", mode => 'idle_close', ms => 0, count => 1);
	fault(pattern => "DROP TABLE IF EXISTS `$db`.`${prefix}stg_", mode => 'idle_close', ms => 0, count => 1);
	my ($inv1, $state) = split /\|/, psql_ok(refresh_row_sql($route, $E, $inv));
	is($state, 'completed', 'clean-up reply lost: the refresh completes');
	my @lists = grep { $_->{query} =~ /startsWith\(name, '\Q$prefix\E'\)/ } ch_log_since($seq);
	is(join(' ', map { $_->{status} } @lists), 'idle-closed 200',
		'clean-up reply lost: the listing was closed unanswered, then sent again');
	my @drops = grep { $_->{query} =~ /^DROP TABLE IF EXISTS `\Q$db\E`\.`\Q${prefix}\Estg_/ } ch_log_since($seq);
	is(join(' ', map { $_->{status} } @drops), 'idle-closed 200',
		'clean-up reply lost: the first DROP was closed unanswered, the clean-up\'s ran');
	is_deeply(own_tables($route, $inv), [], 'clean-up reply lost: no staging table is left');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'clean-up reply lost: the target is the new generation');

	# Refused, both when the staging tables are dropped beside the RENAME
	# to the backup and by the clean-up: the window stays published, the
	# caller gets its row and a warning that names recover(), which drops
	# what is left.
	my ($inv2, $prefix2) = new_invocation($route);
	fault(pattern => "DROP TABLE IF EXISTS `$db`.`${prefix2}stg_", mode => 'error', code => 497, count => 2);
	my ($rc, $out, $err) = psql(refresh_row_sql($route, $E, $inv2));
	is($rc, 0, 'clean-up refused: the refresh does not fail');
	like($out, qr/^\Q$inv2\E\|completed\|/, 'clean-up refused: it returns the completed row');
	like($err, qr/WARNING:  staging tables of invocation \Q$inv2\E were not dropped: ClickHouse error 497/,
		'clean-up refused: a warning names the invocation and the server\'s refusal');
	like($err, qr/HINT:  SELECT \* FROM dpwin\.recover\('\Q$inv2\E'\) drops them\./,
		'clean-up refused: its hint names recover()');
	is(invocation_field($inv2, 'state'), 'completed', 'clean-up refused: journaled completed');
	is(scalar(grep { /_stg_/ } @{ own_tables($route, $inv2) }), 4, 'clean-up refused: the four staging tables are left');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'clean-up refused: the target is the new generation');
	is(psql_ok("SELECT state FROM dpwin.recover('$inv2')"), 'completed', 'clean-up refused: recover() says completed');
	is_deeply(own_tables($route, $inv2), [], 'clean-up refused: and dropped the staging tables');
}

# --- the EXCHANGE probe fails while the workers read the source ---------------------

{
	my ($route, $t) = new_event_route('probe');
	my $pre = ch_rows($t);
	my ($inv, $prefix) = new_invocation($route);
	# earlier refreshes probed the database: forget it, as a restart would
	psql_ok("SELECT dpwin_test.forget_exchange_probe('sandbox_ch', '$db')");
	my $seq = ch_log_seq();
	# A failure that may pass: the probe is asked again once the workers
	# are done, and the refresh completes.
	fault(pattern => "CREATE TABLE `$db`.`${prefix}probe_", mode => 'error', code => 241, count => 1);
	my ($inv1, $state) = split /\|/, psql_ok(refresh_row_sql($route, $E, $inv));
	is($state, 'completed', 'probe refused during the extraction: the refresh completes');
	my @log = ch_log_since($seq);
	my @creates = grep { $log[$_]{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q${prefix}\Eprobe_[0-9a-f]+_a`/ } 0 .. $#log;
	is(join(' ', map { $log[$_]{status} } @creates), '500 200', 'probe refused: its first CREATE failed, a second one ran');
	my ($last_digest) = reverse grep { $log[$_]{query} =~ /^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed.* FROM `\Q$db\E`\.`\Q${prefix}\Estg_/s } 0 .. $#log;
	ok(defined $last_digest && $creates[1] > $last_digest, 'probe refused: it was asked again after the last chunk was verified');
	is_deeply(own_tables($route, $inv), [], 'probe refused: no probe or staging table is left');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'probe refused: the target is the new generation');

	# The target is the generation that refresh published: the next one
	# (a new backend, as a scheduled refresh is) does not probe.
	my ($inv_again, $prefix_again) = new_invocation($route);
	$seq = ch_log_seq();
	is((split /\|/, psql_ok(refresh_row_sql($route, $E, $inv_again)))[1], 'completed', 'published generation in place: the refresh completes');
	my @probed = grep { $_->{query} =~ /^(CREATE|EXCHANGE) TABLES? `\Q$db\E`\.`\Q${prefix_again}\Eprobe_/ } ch_log_since($seq);
	is(scalar(@probed), 0, 'published generation in place: EXCHANGE TABLES is not probed');

	# Replaced behind dpwin's back (same rows, another table), in a
	# database whose probe is forgotten: probed again.
	replace_by_copy($t);
	psql_ok("SELECT dpwin_test.forget_exchange_probe('sandbox_ch', '$db')");

	# EXCHANGE TABLES does not work: the refresh fails at once, before any
	# chunk is verified.
	my ($inv2, $prefix2) = new_invocation($route);
	$seq = ch_log_seq();
	fault(pattern => "EXCHANGE TABLES `$db`.`${prefix2}probe_", mode => 'error', code => 48, count => 1);
	like(psql_err(refresh_row_sql($route, $E, $inv2)), qr/^0A000: ClickHouse database `\Q$db\E` on server "sandbox_ch" does not support EXCHANGE TABLES/,
		'probe says no: the refresh fails with 0A000');
	is(invocation_field($inv2, 'state'), 'failed', 'probe says no: failed');
	is(scalar(grep { $_->{query} =~ /^EXCHANGE TABLES `\Q$db\E`\.`\Q${prefix2}\Eprobe_/ } ch_log_since($seq)), 1,
		'probe says no: the probe was not asked again');
	is_deeply(ch_rows($t), after_refresh($pre, $E), 'probe says no: the target is untouched');
}

# --- clean up -------------------------------------------------------------

ch_control('POST', '/faults/clear');
drop_fixture();

done_testing();
