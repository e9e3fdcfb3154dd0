# dpwin.rollback(route [, to_backup]) (docs/recovery.md, "Rolling back a
# generation"; docs/design.md, "Rolling back a generation").
#
# Every scenario has a target and a route of its own (test/lib/DpwinCrash.pm):
# window E1 is published, then E2, so the target is E2's generation (here
# "bad") and E1's generation ("good") is the route's newest backup.  A
# rollback puts "good" back.  After each one the target is checked by its
# UUID and by its full row multiset, computed from the target's initial rows
# and the PostgreSQL source (never from dpwin's digests), and the endpoint's
# query log says how many EXCHANGEs were sent.
#
#   shapes     a rollback on day-, month- and unpartitioned targets; the
#              replaced generation kept as a backup; the route state kept;
#              a rollback of the rollback; a refresh after a rollback
#   skip       a skip_unchanged route: the refresh after a rollback does not
#              take the last refresh's digests for the rolled-back target
#              (its UUID is not that refresh's generation), and takes them
#              again once a second rollback put that generation back
#   refused    bad input before any I/O; a backup that no longer exists; a
#              backup whose columns or engine no longer match the target
#   crashes    on day-, month- and unpartitioned targets: a coordinator
#              SIGKILL before the intent, after the intent
#              before the EXCHANGE, and after the EXCHANGE ran; an EXCHANGE
#              whose reply is lost: each leaves the old or the new
#              generation exactly, and recover() settles it once
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish ch_rows uuid_of micros after_refresh multiset_is exchanges);
use DpwinCrash;
use DpwinEndpoint qw(release wait_running);

my $db = "t135_$$";
my $E3 = '2026-09-10 00:00:00+00';
my %ENGINE = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => 'ORDER BY id');

crash_setup($db);

# E1 then E2 published on a new scenario: the target is E2's generation
# (bad), E1's (good) is the newest backup, by its UUID.
sub published
{
	my ($tag, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $s = scenario($tag, %opt);
	$s->{good} = $s->{old};
	$s->{good_uuid} = $s->{pre_uuid};
	is(psql_ok(refresh_sql($s->{route}, $E2)), 'completed', "$tag: window E2 published");
	$s->{bad} = $s->{new};
	multiset_is(ch_rows($s->{t}), $s->{bad}, "$tag: the target is E2's generation");
	$s->{bad_uuid} = uuid_of($s->{t});
	$s->{backup} = newest_backup($s);
	is(uuid_of($s->{backup}), $s->{good_uuid}, "$tag: E1's generation is the route's newest backup");
	return $s;
}

sub newest_backup
{
	my ($s) = @_;
	return psql_ok("SELECT backup_table FROM dpwin.invocations WHERE route_name = '$s->{route}'"
		  . " AND publication_outcome = 'published' ORDER BY created_at DESC LIMIT 1");
}

sub rollback_sql
{
	my ($s, $backup) = @_;
	return "SELECT state FROM dpwin.rollback('$s->{route}'" . (defined $backup ? ", '$backup'" : '') . ")";
}

# The route's newest rollback invocation.
sub last_rollback
{
	my ($s) = @_;
	return psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$s->{route}'"
		  . " AND kind = 'rollback' ORDER BY created_at DESC LIMIT 1");
}

# The target is exactly generation $which (good or bad) of scenario $s: by
# its UUID and by its rows.
sub target_is
{
	my ($s, $which, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(uuid_of($s->{t}), $s->{"${which}_uuid"}, "$label: the target is the $which generation (UUID)");
	multiset_is(ch_rows($s->{t}), $s->{$which}, "$label: the target is the $which generation (rows)");
}

# A completed rollback $inv that put `good` back: the journal, the replaced
# generation kept as a backup under the rollback's name, one EXCHANGE since
# $seq, the route state left at E2, nothing left behind.
sub check_rolled_back
{
	my ($s, $inv, $seq, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	target_is($s, 'good', $label);
	my ($kind, $state, $outcome, $kept, $restored, $in_place) = split /\|/,
	  psql_ok("SELECT i.kind, i.state, i.publication_outcome, i.backup_table, p.generation_table, p.generation_uuid"
		  . " FROM dpwin.invocations i JOIN dpwin.publication p USING (invocation_id) WHERE invocation_id = '$inv'"), -1;
	is("$kind $state $outcome", 'rollback completed published', "$label: journaled as a completed rollback");
	is($restored, $s->{backup}, "$label: its generation is the backup it put back");
	is($in_place, $s->{good_uuid}, "$label: the intent names the backup's UUID");
	like($kept, qr/^_dpwin_backup_$s->{rid}_20260909t000000_[0-9a-f]{12}$/, "$label: the replaced generation has a backup name");
	is(uuid_of($kept), $s->{bad_uuid}, "$label: the replaced generation is kept under it (UUID)");
	multiset_is(defined uuid_of($kept) ? ch_rows($kept) : [], $s->{bad},
		"$label: the replaced generation is kept under it (rows)");
	is(uuid_of($s->{backup}), undef, "$label: the backup's name is free again");
	is(scalar(exchanges($seq, $s->{t})), 1, "$label: one EXCHANGE was sent");
	is(route_state($s->{route}), micros($E2), "$label: route_state is still E2");
	is(psql_ok("SELECT metrics->>'kind' || ' ' || (metrics->>'target_uuid') || ' ' || (metrics->>'replaced_uuid')"
			  . " FROM dpwin.evidence WHERE invocation_id = '$inv'"),
		"rollback $s->{good_uuid} $s->{bad_uuid}", "$label: the evidence says which generation is in place");
	is_deeply(leftovers(), [], "$label: no staging or generation table is left");
	is(psql_ok("SELECT last_kind || ' ' || last_state || ' ' || (last_interval_end = '$E2'::timestamptz)"
			  . " FROM dpwin.health WHERE route_name = '$s->{route}'"),
		'rollback completed true', "$label: dpwin.health shows the rollback as the last invocation, E2 as the last window");
	return $kept;
}

# ---- shapes ----------------------------------------------------------------

for my $shape (qw(day month flat))
{
	my $s = published("rb_$shape", engine => $ENGINE{$shape});
	my $seq = ch_log_seq();
	my $row = psql_ok("SELECT state, generation_table, backup_table, chunks, source_rows, final_rows,"
		  . " details->'evidence'->>'target_uuid' FROM dpwin.rollback('$s->{route}')");
	my ($state, $gen, $bk, $chunks, $src, $final, $uuid) = split /\|/, $row, -1;
	is($state, 'completed', "$shape: dpwin.rollback() completes");
	is($gen, $s->{backup}, "$shape: its generation_table is the backup it put back");
	is("$chunks $src $final", "0 0 " . scalar(@{ $s->{good} }), "$shape: no chunk, no source row, the target's rows");
	is($uuid, $s->{good_uuid}, "$shape: its result names the UUID in place");
	my $inv = last_rollback($s);
	my $kept = check_rolled_back($s, $inv, $seq, $shape);
	is($bk, $kept, "$shape: its backup_table is the replaced generation's");

	# a refresh after it publishes on the rolled-back target
	my $expect = after_refresh($s->{good}, $E3);
	is(psql_ok(refresh_sql($s->{route}, $E3)), 'completed', "$shape: a refresh of E3 after the rollback");
	multiset_is(ch_rows($s->{t}), $expect, "$shape: E3 published over the rolled-back generation");
	is(route_state($s->{route}), micros($E3), "$shape: route_state moved on to E3");
	next unless $shape eq 'day';

	# a rollback of the rollback's refresh, then of that rollback: the
	# newest backup each time, so they undo one another
	$s->{after_e3} = $expect;
	$s->{after_e3_uuid} = uuid_of($s->{t});
	is(psql_ok(rollback_sql($s)), 'completed', 'day: E3 rolled back');
	target_is($s, 'good', 'day: E3 rolled back');
	$seq = ch_log_seq();
	is(psql_ok(rollback_sql($s)), 'completed', 'day: the rollback rolled back');
	is(uuid_of($s->{t}), $s->{after_e3_uuid}, 'day: the rollback of the rollback put E3\'s generation back (UUID)');
	multiset_is(ch_rows($s->{t}), $s->{after_e3}, 'day: the rollback of the rollback put E3\'s generation back (rows)');
	is(scalar(exchanges($seq, $s->{t})), 1, 'day: with one EXCHANGE');
	is(uuid_of(newest_backup($s)), $s->{good_uuid}, 'day: and kept the generation it replaced as the newest backup');

	# the kept backup named explicitly
	$seq = ch_log_seq();
	is(psql_ok(rollback_sql($s, $kept)), 'completed', 'day: a rollback to a backup named by the caller');
	is(uuid_of($s->{t}), $s->{bad_uuid}, 'day: it put that backup (E2\'s generation) in place (UUID)');
	multiset_is(ch_rows($s->{t}), $s->{bad}, 'day: it put that backup (E2\'s generation) in place (rows)');
	is(route_state($s->{route}), micros($E3), 'day: route_state stays E3');
	is_deeply(leftovers(), [], 'day: no staging or generation table is left');
}

# ---- the recipe of docs/recovery.md, "Rolling back a generation" -------------

{
	my $s = published('rb_recipe', engine => $ENGINE{month});
	my $r = $s->{route};
	my @list = split /\n/, psql_ok("SELECT created_at, kind, interval_end, backup_table"
		  . " FROM dpwin.invocations WHERE route_name = '$r' AND publication_outcome = 'published'"
		  . " ORDER BY created_at DESC");
	is((split /\|/, $list[0])[3], $s->{backup}, 'recipe 1: the newest backup is listed first');
	is(scalar(@list), 2, 'recipe 1: one backup per publication');
	my ($inv, $state, $put_back, $kept, $in_place) = split /\|/,
	  psql_ok("SELECT invocation_id, state, generation_table AS put_back, backup_table AS replaced_kept_as,"
		  . " details->'evidence'->>'target_uuid' AS in_place FROM dpwin.rollback('$r')");
	is("$state $put_back $in_place", "completed $s->{backup} $s->{good_uuid}", 'recipe 2: rolled back, the result names what is in place');
	is(uuid_of($s->{t}), $in_place, 'recipe 2: in_place is the target\'s UUID');
	is(uuid_of($kept), $s->{bad_uuid}, 'recipe 2: replaced_kept_as holds the replaced generation');
	is(psql_ok("SELECT d->>'verdict' AS verdict, d->>'target_uuid_now' = d->'intent'->>'generation_uuid' AS in_place"
			  . " FROM dpwin.reconcile('$inv') AS d"), 'published|t', 'recipe 3: reconcile() says published, in place');
	is(psql_ok("SELECT state FROM dpwin.rollback('$r')"), 'completed', 'recipe 4: undone');
	target_is($s, 'bad', 'recipe 4: undone');
	is(psql_ok("SELECT d->>'verdict' FROM dpwin.reconcile('$inv') AS d"), 'superseded',
		'recipe 3: once replaced, reconcile() says superseded');
}

# ---- skip_unchanged ----------------------------------------------------------

{
	my $s = published('rb_skip', engine => $ENGINE{day}, skip => 1);
	is(psql_ok(rollback_sql($s)), 'completed', 'skip: rolled back');
	target_is($s, 'good', 'skip: rolled back');
	# The last refresh's digests describe E2's generation, not this one: a
	# refresh that took them would skip every chunk and leave E1's rows.
	is(psql_ok(refresh_sql($s->{route}, $E2)), 'completed', 'skip: E2 refreshed again after the rollback');
	multiset_is(ch_rows($s->{t}), $s->{bad}, 'skip: the refresh published the source\'s E2 over the rolled-back target');
	my $inv = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$s->{route}'"
		  . " ORDER BY created_at DESC LIMIT 1");
	is(psql_ok("SELECT metrics->>'cached_digests' FROM dpwin.evidence WHERE invocation_id = '$inv'"), 0,
		'skip: it took no digest of the last refresh');
	$s->{bad_uuid} = uuid_of($s->{t});

	# E2's generation in place again by a rollback: its own digests apply
	is(psql_ok(rollback_sql($s)), 'completed', 'skip: that refresh rolled back');
	is(psql_ok(rollback_sql($s)), 'completed', 'skip: and the rollback rolled back');
	is(uuid_of($s->{t}), $s->{bad_uuid}, 'skip: the refresh\'s generation is in place again');
	is(psql_ok(refresh_sql($s->{route}, $E2)), 'completed', 'skip: E2 refreshed once more');
	multiset_is(ch_rows($s->{t}), $s->{bad}, 'skip: the target is the source\'s E2');
	$inv = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$s->{route}'"
		  . " ORDER BY created_at DESC LIMIT 1");
	is(psql_ok("SELECT (metrics->>'cached_digests')::int > 0 AND (metrics->>'skipped_chunks')::int = 4"
			  . " FROM dpwin.evidence WHERE invocation_id = '$inv'"), 't',
		'skip: it took the digests of the generation in place, and skipped every chunk');
}

# ---- refused ---------------------------------------------------------------

{
	my $s = published('rb_refused', engine => $ENGINE{flat});
	my $fresh = "${db}_fresh_$$";
	ch_ok("CREATE TABLE `$db`.`tgt_fresh` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String)) ENGINE = MergeTree ORDER BY id");
	psql_ok("SELECT dpwin.create_route('$fresh', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', 'tgt_fresh',"
		  . " interval '1 day', interval '6 hours')");
	my $n = psql_ok('SELECT count(*) FROM dpwin.invocation');
	my $seq = ch_log_seq();
	like(psql_err("SELECT * FROM dpwin.rollback(NULL)"), qr/^22004: route must not be NULL/, 'refused: a NULL route');
	like(psql_err("SELECT * FROM dpwin.rollback('no_such_route_$$')"), qr/^42704: .*no_such_route_$$/,
		'refused: an unknown route');
	like(psql_err("SELECT * FROM dpwin.rollback('$fresh')"), qr/^55000: route "\Q$fresh\E" has no backup to roll back to/,
		'refused: a route that never published');
	like(psql_err("SELECT * FROM dpwin.rollback('$s->{route}', 'tgt_rb_refused')"),
		qr/^22023: "tgt_rb_refused" is not a backup of route "\Q$s->{route}\E"/, 'refused: a table that is not one of its backups');
	like(psql_err("SELECT * FROM dpwin.rollback('$s->{route}', '')"), qr/^22023: /, 'refused: an empty backup name');
	my $other = "t135_other_$$";
	psql_ok("CREATE ROLE $other; GRANT dpwin_operator TO $other");
	like(psql_err("SET ROLE $other; SELECT * FROM dpwin.rollback('$s->{route}')"),
		qr/^42501: must be owner of route "\Q$s->{route}\E" to put a backup back into it/, 'refused: a caller who does not own the route');
	psql_ok("DROP ROLE $other");
	is(scalar(ch_log_since($seq)), 0, 'refused: nothing was sent to ClickHouse');
	is(psql_ok('SELECT count(*) FROM dpwin.invocation'), $n, 'refused: nothing was journaled');
	psql_ok("SELECT dpwin.drop_route('$fresh')");

	# a journaled backup that was dropped since
	my $oldest = psql_ok("SELECT backup_table FROM dpwin.invocations WHERE route_name = '$s->{route}'"
		  . " AND publication_outcome = 'published' ORDER BY created_at LIMIT 1");
	ch_ok("DROP TABLE `$db`.`$oldest` SYNC");
	like(psql_err(rollback_sql($s, $oldest)), qr/^42P01: backup `\Q$db\E`\.`\Q$oldest\E` of route .* does not exist/,
		'refused: a backup that was dropped (42P01)');
	is(psql_ok('SELECT count(*) FROM dpwin.invocation'), $n, 'refused: and nothing was journaled');

	# a backup whose columns no longer match the target's
	my $bk = $s->{backup};
	ch_ok("ALTER TABLE `$db`.`$bk` MODIFY COLUMN v LowCardinality(Nullable(String))");
	$seq = ch_log_seq();
	my ($rc, $out, $err) = psql(rollback_sql($s) . ';', timeout => 120);
	like($err, qr/ERROR:\s+backup `\Q$db\E`\.`\Q$bk\E` does not have the columns of target/, 'refused: a backup with other types')
	  or diag($err);
	like($err, qr/HINT:\s+This backup can no longer take the place of target/, 'refused: with a hint');
	my $inv = last_rollback($s);
	is(psql_ok("SELECT state || ' ' || error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"),
		'failed 42804', 'refused: the rollback failed with 42804');
	is(scalar(exchanges($seq, $s->{t})), 0, 'refused: no EXCHANGE was sent');
	target_is($s, 'bad', 'refused: other types');

	# ... or whose engine no longer matches
	ch_ok("ALTER TABLE `$db`.`$bk` MODIFY COLUMN v Nullable(String)");
	ch_ok("ALTER TABLE `$db`.`$bk` MODIFY SETTING merge_with_ttl_timeout = 3601");
	$seq = ch_log_seq();
	like(psql_err(rollback_sql($s)), qr/^55000: backup `\Q$db\E`\.`\Q$bk\E` does not have the engine of target/,
		'refused: a backup with another engine (55000)');
	is(scalar(exchanges($seq, $s->{t})), 0, 'refused: no EXCHANGE was sent');
	target_is($s, 'bad', 'refused: another engine');
	is(uuid_of($bk), $s->{good_uuid}, 'refused: the backup is kept as it is');
	is_deeply(leftovers(), [], 'refused: no staging or generation table is left');
}

# ---- crashes -----------------------------------------------------------------

# The rollback of scenario $s in the background; returns its handle and
# its invocation id, once journaled.
sub start_rollback
{
	my ($s) = @_;
	my $h = bg_psql(rollback_sql($s));
	my $inv;
	ok(wait_until(sub { ($inv = last_rollback($s)) ne '' }, 60), "$s->{tag}: the rollback is journaled");
	return ($h, $inv);
}

sub rollback_state
{
	my ($inv) = @_;
	return psql_ok("SELECT state || '|' || coalesce(publication_outcome, '') FROM dpwin.invocations WHERE invocation_id = '$inv'");
}

# recover() settles the rollback $inv with $n EXCHANGEs (since $seq), then
# a second recover() changes nothing.
sub settle
{
	my ($s, $inv, $seq, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', "$label: recover() completes the rollback");
	check_rolled_back($s, $inv, $seq, $label);
	my $seq2 = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', "$label: a second recover()");
	is(scalar(exchanges($seq2, $s->{t})), 0, "$label: sends no EXCHANGE");
	target_is($s, 'good', "$label: after the second recover()");
}

for my $shape (qw(day month flat))
{
	# SIGKILL before the intent: the rollback's admission of the target is held
	{
		my $s = published("rb_pre_$shape", engine => $ENGINE{$shape});
		my $seq = ch_log_seq();
		fault(pattern => "FROM system.databases WHERE name = '$db'", mode => 'hold', count => 1);
		my ($h, $inv) = start_rollback($s);
		ok(wait_running(qr/FROM system\.databases WHERE name = '\Q$db\E'/, 1, phase => 'holding'),
			"$s->{tag}: the rollback's admission waits on the server");
		crash([ coordinator_pid($inv) ], $h, $s->{tag});
		release("FROM system.databases WHERE name = '$db'");
		is(rollback_state($inv), 'verified|', "$s->{tag}: journaled verified, no intent");
		target_is($s, 'bad', "$s->{tag}: after the crash");
		if ($shape eq 'day')
		{
			settle($s, $inv, $seq, $s->{tag});
		}
		else
		{
			# without an intent it may be abandoned instead; then a new one completes
			is(psql_ok("SELECT state FROM dpwin.abandon('$inv')"), 'abandoned', "$s->{tag}: abandon() ends it");
			target_is($s, 'bad', "$s->{tag}: after abandon()");
			is(uuid_of($s->{backup}), $s->{good_uuid}, "$s->{tag}: abandon() kept the backup");
			is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: no EXCHANGE was sent");
			$seq = ch_log_seq();
			is(psql_ok(rollback_sql($s)), 'completed', "$s->{tag}: a new rollback completes");
			check_rolled_back($s, last_rollback($s), $seq, "$s->{tag}: the new rollback");
		}
	}

	# SIGKILL after the intent, the EXCHANGE held and never run
	{
		my $s = published("rb_intent_$shape", engine => $ENGINE{$shape});
		my $pat = "EXCHANGE TABLES `$db`.`$s->{t}` AND";
		fault(pattern => $pat, mode => 'hold', count => 1);
		my ($h, $inv) = start_rollback($s);
		ok(wait_running(qr/^\Q$pat\E/, 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		is(rollback_state($inv), 'publishing|', "$s->{tag}: the intent is journaled");
		crash([ coordinator_pid($inv) ], $h, $s->{tag});
		# the endpoint's restart drops the held EXCHANGE unrun
		sandbox_cmd('restart-ch');
		target_is($s, 'bad', "$s->{tag}: after the crash");
		like(psql_err(refresh_sql($s->{route}, $E2)), qr/^55006: invocation \Q$inv\E of this target has an unsettled publication/,
			"$s->{tag}: a refresh waits until it is settled");
		like(psql_err(rollback_sql($s)), qr/^55006: invocation \Q$inv\E of this target has an unsettled publication/,
			"$s->{tag}: so does another rollback");
		my $seq = ch_log_seq();
		settle($s, $inv, $seq, $s->{tag});
	}

	# SIGKILL after the EXCHANGE ran, before its outcome was journaled
	{
		my $s = published("rb_exch_$shape", engine => $ENGINE{$shape});
		my $pat = "EXCHANGE TABLES `$db`.`$s->{t}` AND";
		my $seq = ch_log_seq();
		fault(pattern => $pat, mode => 'hold', count => 1);
		my ($h, $inv) = start_rollback($s);
		ok(wait_running(qr/^\Q$pat\E/, 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		# the intent is committed: recording the outcome waits for this row lock
		my $lk = hold_locks("SELECT 1 FROM dpwin.publication WHERE invocation_id = '$inv' FOR UPDATE");
		is(release($pat), 1, "$s->{tag}: the EXCHANGE is released once the lock is held");
		my $pid = coordinator_pid($inv);
		ok(wait_answered($seq, qr/^\Q$pat\E/), "$s->{tag}: the EXCHANGE was answered");
		ok(wait_until(sub { waits_on_lock($pid) }, 30), "$s->{tag}: the coordinator waits to journal the outcome");
		crash([$pid], $h, $s->{tag});
		bg_finish($lk);
		is(rollback_state($inv), 'publishing|', "$s->{tag}: journaled publishing, no outcome");
		target_is($s, 'good', "$s->{tag}: after the crash");
		settle($s, $inv, $seq, $s->{tag});
	}

	# the EXCHANGE runs and its reply is lost: settled by the UUIDs, not sent again
	{
		my $s = published("rb_lost_$shape", engine => $ENGINE{$shape});
		my $pat = "EXCHANGE TABLES `$db`.`$s->{t}` AND";
		my $seq = ch_log_seq();
		fault(pattern => $pat, mode => 'lost', count => 1);
		my ($rc, $out, $err) = psql(rollback_sql($s));
		is($out, 'completed', "$s->{tag}: the rollback completes") or diag($err);
		my @x = exchanges($seq, $s->{t});
		is(scalar(@x), 1, "$s->{tag}: after one EXCHANGE") or diag(explain \@x);
		is($x[0]{status}, 'lost', "$s->{tag}: whose reply was lost");
		check_rolled_back($s, last_rollback($s), $seq, $s->{tag});
	}
}

# A publication left published (its coordinator killed in the evidence
# function) is finished before a rollback may replace its generation.
{
	my $evkey = 135_000 + $$ % 100_000;
	held_evidence_function($db, $evkey);
	my $s = scenario('rb_unfinished', engine => $ENGINE{day}, evidence => "$db.record_evidence(uuid,jsonb)");
	my $lk = hold_locks("SELECT pg_advisory_xact_lock($evkey)");
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { state_of($s->{inv}) eq 'published' }, 60), 'unfinished: E2 is published');
	my $pid = coordinator_pid($s->{inv});
	ok(wait_until(sub { waits_on_lock($pid) }, 30), 'unfinished: its evidence function waits');
	crash([$pid], $h, 'unfinished');
	bg_finish($lk);
	my $seq = ch_log_seq();
	like(psql_err(rollback_sql($s)), qr/^55006: invocation \Q$s->{inv}\E of this target has not finished its publication/,
		'unfinished: a rollback waits until it is finished');
	is(scalar(exchanges($seq, $s->{t})), 0, 'unfinished: no EXCHANGE was sent');
	is(psql_ok("SELECT state FROM dpwin.recover('$s->{inv}')"), 'completed', 'unfinished: recover() finishes it');
	is(psql_ok(rollback_sql($s)), 'completed', 'unfinished: then the rollback completes');
	is(uuid_of($s->{t}), $s->{pre_uuid}, 'unfinished: E1\'s generation is back (UUID)');
	multiset_is(ch_rows($s->{t}), $s->{old}, 'unfinished: E1\'s generation is back (rows)');
	is(psql_ok("SELECT count(*) FROM $db.ev_log l JOIN dpwin.invocation i USING (invocation_id)"
			  . " WHERE i.kind = 'rollback' AND l.metrics->>'kind' = 'rollback'"), 1,
		'unfinished: the route\'s evidence function recorded the rollback once');
}

crash_teardown();
done_testing();
