# dpwin.verify() and refreshes that skip unchanged chunks (src/verify.c,
# the SKIP_UNCHANGED mode of src/worker.c and src/stage.c).
#
# A one-day window in six-hour chunks over a source with NULL window rows
# and duplicates.  After a refresh every chunk matches.  Then the target is
# tampered with in three chunks (an extra row, an updated value, a
# lightweight-deleted row) and the source changed in a fourth's place:
# verify names exactly those chunks, writes nothing to ClickHouse (query
# log, system.parts) and journals what it read.  A refresh with
# skip_unchanged re-stages exactly the drifting chunks and publishes the
# same multiset as a full refresh of the same data into a second target.
# A verification runs while a refresh holds the lease.  Non-operators are
# refused before any I/O.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinEndpoint qw(release wait_running);
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes create_event_table ch_rows pg_rows
  uuid_of micros fault bg_psql bg_finish wait_logged);

my $db = "t075_$$";
my $schema = "t075_$$";
my $E = '2026-09-09 00:00:00+00';

fresh_fixture($db, $schema);
psql_ok("CREATE TABLE $schema.src (id bigint NOT NULL, w timestamptz, v text);
	INSERT INTO $schema.src
	SELECT g, timestamptz '2026-09-08 00:00:00+00' + g * interval '17 minutes', 'v' || g
	  FROM generate_series(0, 84) g;
	INSERT INTO $schema.src SELECT * FROM $schema.src WHERE id % 9 = 0;
	INSERT INTO $schema.src VALUES (900, NULL, 'null window'), (900, NULL, 'null window'),
		(901, '2026-09-07 12:00:00+00', 'before the window');");

my @routes;
my %chunk_of;

# An invocation's evidence of the window [lo, hi) and the published
# target's, counted here on its own: whether the generation was counted
# from its parts (the evidence's only), the rows of each UTC day, the
# rows, the lowest and highest value, and the rows without a window value.
sub evidence_facts
{
	my ($inv, $table, $lo, $hi) = @_;
	(my $evidence = psql_ok("SELECT concat_ws('|', e->'generation'->>'counted_by_parts', e->'utc_days'->>'rows',"
		  . " e->'window_bounds'->>'window_rows', e->'window_bounds'->>'min', e->'window_bounds'->>'max',"
		  . " e->'window_bounds'->>'null_window_rows')"
		  . " FROM (SELECT result->'evidence' e FROM dpwin.invocation WHERE invocation_id = '$inv') i")) =~ s/, /,/g;
	my $target = ch_ok("SELECT concat(toJSONString(groupArray(n)), '|', toString(sum(n)), '|', toString(min(lo)), '|',"
		  . " toString(max(hi)), '|', toString((SELECT count() FROM `$db`.`$table` WHERE w IS NULL)))"
		  . " FROM (SELECT toDate(w) d, count() n, min(w) lo, max(w) hi FROM `$db`.`$table`"
		  . " WHERE w >= '$lo' AND w < '$hi' GROUP BY d ORDER BY d)");
	chomp $target;
	return ($evidence, $target);
}
for my $name ('full', 'skip')
{
	my $route = "t075_${name}_$$";
	push @routes, $route;
	create_event_table($name, "(1, '2026-09-01 00:00:00', 'kept'), (4, NULL, 'null'), (4, NULL, 'null'),"
		  . " (2, '2026-09-08 10:00:00', 'stale')");
	psql_ok("SELECT dpwin.create_route('$route', '$schema.src'::regclass, 'w', 'sandbox_ch', '$db', '$name',"
		  . " interval '1 day', interval '6 hours', parallelism => 2"
		  . ($name eq 'skip' ? ", skip_unchanged => true" : '') . ")");
}
my ($full, $skip) = @routes;
is(psql_ok("SELECT string_agg(skip_unchanged::text, ',' ORDER BY route_name) FROM dpwin.routes WHERE route_name IN ('$full', '$skip')"),
	'false,true', 'dpwin.routes shows skip_unchanged');

sub verify
{
	my ($route) = @_;
	return [ map { [ split /\|/ ] } split /\n/,
		psql_ok("SELECT chunk_no, source_rows, target_rows, matches FROM dpwin.verify('$route', '$E')") ];
}

sub drifting
{
	my ($v) = @_;
	return [ map { $_->[0] } grep { $_->[3] eq 'f' } @$v ];
}

# Rows of the window in PostgreSQL per chunk, computed here, not by dpwin.
sub src_counts
{
	return [ split /\n/, psql_ok("SELECT count(s.id) FROM generate_series(0, 3) c"
		  . " LEFT JOIN $schema.src s ON s.w >= timestamptz '2026-09-08 00:00:00+00' + c * interval '6 hours'"
		  . " AND s.w < timestamptz '2026-09-08 00:00:00+00' + (c + 1) * interval '6 hours'"
		  . " GROUP BY c ORDER BY c") ];
}

for my $route (@routes)
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E')"), 'completed', "$route: first refresh");
}
my $v = verify($full);
is(scalar(@$v), 4, 'verify: one row per chunk');
is_deeply(drifting($v), [], 'verify after a refresh: every chunk matches');
is_deeply([ map { $_->[1] } @$v ], src_counts(), 'verify: source rows per chunk as PostgreSQL counts them');
is_deeply([ map { $_->[2] } @$v ], src_counts(), 'verify: target rows per chunk equal');

# --- tampering and source changes ------------------------------------------------

sub tamper
{
	my ($t) = @_;
	# chunk 0: an extra row; chunk 1: an updated value; chunk 2: a deleted row
	ch_ok("INSERT INTO `$db`.`$t` VALUES (7000, '2026-09-08 01:00:00', 'extra')");
	ch_ok("ALTER TABLE `$db`.`$t` UPDATE v = 'changed' WHERE id = 25 SETTINGS mutations_sync = 2");
	ch_ok("DELETE FROM `$db`.`$t` WHERE id = 46");
}
tamper($_) for qw(full skip);
# chunk 3: a changed source row
psql_ok("UPDATE $schema.src SET v = 'source changed' WHERE id = 70");

my $seq = ch_log_seq();
my $parts_before = ch_ok("SELECT groupArray((name, hash_of_all_files)) FROM (SELECT name, hash_of_all_files"
	  . " FROM system.parts WHERE database = '$db' AND active ORDER BY name)");
my $tables_before = ch_ok("SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = '$db' ORDER BY name)");
$v = verify($full);
is_deeply(drifting($v), [ 0, 1, 2, 3 ], 'verify: the extra row, the update, the deleted row and the source change each drift in their chunk');
is($v->[0][2], $v->[0][1] + 1, 'verify: chunk 0 has one more row in the target');
is($v->[2][2], $v->[2][1] - 1, 'verify: chunk 2 has one row less in the target');
is($v->[1][2], $v->[1][1], 'verify: chunk 1 has as many rows (a value differs)');

my @writes = grep { $_->{query} =~ /^\s*(INSERT|CREATE|ALTER|DELETE|DROP|EXCHANGE|RENAME|TRUNCATE|OPTIMIZE)\b/i }
  ch_log_since($seq);
is(scalar(@writes), 0, 'verify: no write reached ClickHouse (query log)') or diag(join("\n", map { $_->{query} } @writes));
is(ch_ok("SELECT groupArray((name, hash_of_all_files)) FROM (SELECT name, hash_of_all_files"
		  . " FROM system.parts WHERE database = '$db' AND active ORDER BY name)"), $parts_before,
	'verify: no part changed (system.parts)');
is(ch_ok("SELECT groupArray(name) FROM (SELECT name FROM system.tables WHERE database = '$db' ORDER BY name)"),
	$tables_before, 'verify: no table created or dropped');

my ($vuuid, $vdrift, $vmatch) = split /\|/, psql_ok("SELECT target_uuid, drifting_chunks, matches FROM dpwin.verifications"
	  . " WHERE route_name = '$full' ORDER BY started_at DESC LIMIT 1");
is($vuuid, uuid_of('full'), 'verifications: the UUID of the table read');
is("$vdrift|$vmatch", '4|f', 'verifications: four drifting chunks');
is(psql_ok("SELECT count(*) FROM dpwin.verifications v, jsonb_array_elements(v.chunk_results) c"
		  . " WHERE v.route_name = '$full' AND NOT (c->>'matches')::boolean"
		  . " AND v.started_at = (SELECT max(started_at) FROM dpwin.verifications WHERE route_name = '$full')"),
	4, 'verifications: the drifting chunks can be listed');

# --- skipping unchanged chunks -----------------------------------------------------

# Make chunk 1 of the source differ no more than the target: only 0, 1, 2,
# 3 drift.  A second, untouched, pair of chunks (none here) would be
# skipped; so first refresh both, then change one source row only.
for my $route (@routes)
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E')"), 'completed', "$route: refresh after tampering");
}
# What each target must hold after a refresh: its kept rows plus the source
# window as PostgreSQL has it, computed without dpwin.
sub expected_target
{
	return [ sort(@{ pg_rows("w >= '2026-09-08 00:00:00+00' AND w < '$E'") },
			'1|' . micros('2026-09-01 00:00:00+00') . '|kept', '4|NULL|null', '4|NULL|null') ];
}
is_deeply(ch_rows('full'), expected_target(), 'full refresh: the kept rows plus the source window (every chunk drifted)');
is_deeply(ch_rows('skip'), expected_target(), 'skip_unchanged: the same, as PostgreSQL has them');
is_deeply(drifting(verify($skip)), [], 'skip_unchanged: and verify matches');
my ($inv, $skipped) = split /\|/, psql_ok("SELECT invocation_id, metrics->>'skipped_chunks' FROM dpwin.evidence e"
	  . " JOIN dpwin.invocation i USING (invocation_id) JOIN dpwin.route r ON r.route_id = i.route_id"
	  . " WHERE r.route_name = '$skip' ORDER BY i.created_at DESC LIMIT 1");
is($skipped, 0, 'skip_unchanged: nothing skipped when every chunk drifted');

# Now one change in chunk 1 of the source (row 40, at 11:20) and a
# tampered row in chunk 0 of both targets: chunks 2 and 3 are unchanged.
psql_ok("UPDATE $schema.src SET v = 'changed again' WHERE id = 40");
ch_ok("INSERT INTO `$db`.`$_` VALUES (7001, '2026-09-08 02:00:00', 'extra again')") for qw(full skip);
$seq = ch_log_seq();
for my $route (@routes)
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E')"), 'completed', "$route: refresh of two drifting chunks");
}
is_deeply(ch_rows('full'), expected_target(), 'full refresh of two drifting chunks: the kept rows plus the source window');
is_deeply(ch_rows('skip'), expected_target(),
	'skip_unchanged: the target is the kept rows plus the source window, as PostgreSQL has them');
($inv, $skipped) = split /\|/, psql_ok("SELECT invocation_id, metrics->>'skipped_chunks' FROM dpwin.evidence e"
	  . " JOIN dpwin.invocation i USING (invocation_id) JOIN dpwin.route r ON r.route_id = i.route_id"
	  . " WHERE r.route_name = '$skip' ORDER BY i.created_at DESC LIMIT 1");
is($skipped, 2, 'skip_unchanged: evidence counts two skipped chunks');
# The evidence's facts, the skipped chunks' read from the target, are
# the target's.
my ($skip_evidence, $skip_target) = evidence_facts($inv, 'skip', '2026-09-08 00:00:00', '2026-09-09 00:00:00');
is($skip_evidence, "true|$skip_target", 'skip_unchanged: the evidence\'s days, bounds and NULL-window rows are the target\'s');
like($skip_target, qr/\|2$/, '... which holds two rows without a window value');
is(psql_ok("SELECT string_agg(chunk_no || ':' || state, ',' ORDER BY chunk_no) FROM dpwin.chunks WHERE invocation_id = '$inv'"),
	'0:verified,1:verified,2:skipped,3:skipped', 'skip_unchanged: exactly the changed and the tampered chunks were re-staged');
my %staged = map { ($_->{query} =~ /_stg_(\d+)_/)[0] => 1 }
  grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`_dpwin_\Q${\ psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$skip'")}\E_/ } ch_log_since($seq);
is_deeply([ sort keys %staged ], [ 0, 1 ], 'skip_unchanged: rows were sent for chunks 0 and 1 only');
is_deeply(drifting(verify($skip)), [], 'skip_unchanged: verify matches afterwards');

# --- the last publication's digests --------------------------------------------

# A day-partitioned target in one-day chunks: after a refresh each chunk is
# one partition.  A later refresh with skip_unchanged takes each chunk's
# digest from that publication and asks ClickHouse to digest only the
# chunks it did not publish, also after a merge (OPTIMIZE FINAL); a target
# changed since (a mutation: the same rows, other values), or another
# table with the same layout (the backup of the publication before,
# exchanged back), is digested again, and its stale chunk re-staged.
{
	my $route = "t075_cache_$$";
	psql_ok("CREATE TABLE $schema.days (id bigint NOT NULL, w timestamptz NOT NULL, v text);
		INSERT INTO $schema.days SELECT g, timestamptz '2026-09-06 00:00:00+00' + g * interval '37 minutes', 'd' || g
		  FROM generate_series(0, 300) g;");
	ch_ok("CREATE TABLE `$db`.`days` (id Int64, w DateTime64(6, 'UTC'), v Nullable(String))"
		  . " ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id");
	ch_ok("INSERT INTO `$db`.`days` VALUES (1, '2026-09-01 00:00:00', 'kept')");
	psql_ok("SELECT dpwin.create_route('$route', '$schema.days'::regclass, 'w', 'sandbox_ch', '$db', 'days',"
		  . " interval '3 days', interval '1 day', parallelism => 2, skip_unchanged => true)");
	my $kept = '1|' . micros('2026-09-01 00:00:00+00') . '|kept';

	# the target's rows against the source's window plus the kept row
	my $expect = sub {
		my ($lo, $hi) = @_;
		my $out = psql_ok("SELECT id || '|' || ((extract(epoch FROM w) * 1000000)::bigint)::text || '|' || v"
			  . " FROM $schema.days WHERE w >= '$lo' AND w < '$hi'");
		return [ sort($kept, split /\n/, $out) ];
	};
	# refresh; the evidence's counts, the chunks' states, the statements
	# that digested the target's chunks (not the one that reads their facts)
	my $refresh = sub {
		my ($end) = @_;
		my $since = ch_log_seq();
		is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$end')"), 'completed', "cache: refresh to $end");
		my ($inv, $cached, $skipped) = split /\|/, psql_ok("SELECT invocation_id, metrics->>'cached_digests',"
			  . " metrics->>'skipped_chunks' FROM dpwin.evidence e JOIN dpwin.invocation i USING (invocation_id)"
			  . " JOIN dpwin.route r ON r.route_id = i.route_id WHERE r.route_name = '$route'"
			  . " ORDER BY i.created_at DESC LIMIT 1");
		my $states = psql_ok("SELECT string_agg(chunk_no || ':' || state, ',' ORDER BY chunk_no)"
			  . " FROM dpwin.chunks WHERE invocation_id = '$inv'");
		my $digests = grep { $_->{query} =~ /__dpwin_chunk/ && $_->{query} =~ /sipHash128ReferenceKeyed/
			  && $_->{query} =~ /FROM `\Q$db\E`\.`days`/ }
		  ch_log_since($since);
		return ($cached, $skipped, $states, $digests, $inv);
	};

	my ($cached, $skipped, $states, $digests, $inv) = $refresh->($E);
	is("$cached/$skipped/$digests", '0/0/1', 'cache: the first refresh has none, and digests the target once');
	like(psql_ok("SELECT metrics->'generation'->>'layout' FROM dpwin.evidence e JOIN dpwin.invocation i USING (invocation_id)"
		  . " JOIN dpwin.route r ON r.route_id = i.route_id WHERE r.route_name = '$route'"),
		qr/^[0-9a-f]{64}$/, 'cache: the evidence records the fingerprint of the published parts');

	psql_ok("UPDATE $schema.days SET v = 'changed' WHERE id = 100");
	my $since_facts = ch_log_seq();
	($cached, $skipped, $states, $digests, $inv) = $refresh->($E);
	is("$cached/$skipped/$digests", '3/2/0', 'cache: every chunk compared with the last publication, none digested by ClickHouse');
	is($states, '0:skipped,1:skipped,2:verified', 'cache: only the changed chunk was re-staged');
	is_deeply(ch_rows('days'), $expect->('2026-09-06 00:00:00+00', $E), 'cache: the target is the source window plus the kept row');

	# The skipped chunks' facts were read from the target while the workers
	# read the source; the generation was counted from its parts.
	my ($evidence, $target) = evidence_facts($inv, 'days', '2026-09-06 00:00:00', '2026-09-09 00:00:00');
	is($evidence, "true|$target", 'cache: the evidence\'s facts are the target\'s, the skipped chunks\' read beside the workers');
	my $gen = psql_ok("SELECT generation_table FROM dpwin.publication WHERE invocation_id = '$inv'");
	my @read = grep { $_->{query} =~ /FROM `\Q$db\E`\.`\Q$gen\E`/ } ch_log_since($since_facts);
	is(scalar(@read), 0, 'cache: and no statement read the generation: its counts are its parts\' and the target\'s')
	  or diag(join("\n", map { $_->{query} } @read));
	# The generation was cloned whole while the workers compared the chunks,
	# once, and the staged chunk's partition then dropped from it.
	my @log = ch_log_since($since_facts);
	is(scalar(grep { $_->{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q$gen\E`/ } @log), 1,
		'cache: the generation is cloned once');
	is(join(',', map { $_->{query} =~ /^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` (DROP PARTITION .*)$/s ? $1 : () } @log),
		"DROP PARTITION ID '20260908'", 'cache: and the staged chunk\'s partition alone dropped from it');
	is(psql_ok("SELECT concat_ws('/', metrics->'generation'->>'partitions', metrics->'generation'->>'cloned_partitions',"
		  . " metrics->'generation'->>'dropped_partitions') FROM dpwin.evidence WHERE invocation_id = '$inv'"),
		'4/3/1', 'cache: the evidence counts the partitions cloned and dropped');

	# a day later: two chunks from the cache, the new one digested alone
	my $E2 = '2026-09-10 00:00:00+00';
	($cached, $skipped, $states, $digests) = $refresh->($E2);
	is("$cached/$skipped/$digests", '2/2/1', 'cache: a window a day later digests only its new chunk');
	is($states, '0:skipped,1:skipped,2:verified', 'cache: and stages only that one');
	my $w06 = $expect->('2026-09-06 00:00:00+00', '2026-09-07 00:00:00+00');
	is_deeply(ch_rows('days'), [ sort(@$w06[grep { $w06->[$_] ne $kept } 0 .. $#$w06],
				@{ $expect->('2026-09-07 00:00:00+00', $E2) }) ],
		'cache: the target is the new window, the day before it and the kept row');

	# a merge rewrites the target's parts, not its rows: still trusted
	my $names = sub { ch_ok("SELECT groupArray(name) FROM (SELECT name FROM system.parts"
		  . " WHERE database = '$db' AND `table` = 'days' AND active ORDER BY name)") };
	my $before = $names->();
	ch_ok("OPTIMIZE TABLE `$db`.`days` FINAL");
	isnt($names->(), $before, 'cache: OPTIMIZE FINAL rewrote the target\'s parts');
	psql_ok("UPDATE $schema.days SET v = 'changed once more' WHERE id = 130");
	($cached, $skipped, $states, $digests) = $refresh->($E2);
	is("$cached/$skipped/$digests", '3/2/0', 'cache: a merge keeps the last publication\'s digests');
	is($states, '0:skipped,1:skipped,2:verified', 'cache: and the changed chunk alone is re-staged');

	# Refresh E2 with the statement $pattern held on the server once
	# $running shows it there (and $also->($since) holds, if given), merge
	# the target meanwhile, then release it: the completed invocation, its
	# generation table and the statements it sent.
	my $merge_while_held = sub {
		my ($tag, $pattern, $running, $what, $also) = @_;
		fault(pattern => $pattern, mode => 'hold', count => 1);
		my $since = ch_log_seq();
		my $h = bg_psql("SELECT state FROM dpwin_refresh('$route', '$E2')");
		ok(wait_running($running, 1, phase => 'holding'), "$tag: $what");
		$also->($since) if $also;
		my $parts = $names->();
		ch_ok("OPTIMIZE TABLE `$db`.`days` FINAL");
		isnt($names->(), $parts, "$tag: a merge rewrote the target's parts meanwhile");
		is(release($pattern), 1, "$tag: the held statement is released");
		my ($rc, $out, $err) = bg_finish($h);
		is($out, 'completed', "$tag: the refresh completes") or diag($err);
		my $inv = psql_ok("SELECT e.invocation_id FROM dpwin.evidence e JOIN dpwin.route r USING (route_id)"
			  . " WHERE r.route_name = '$route' ORDER BY e.written_at DESC LIMIT 1");
		my $gen = psql_ok("SELECT generation_table FROM dpwin.publication WHERE invocation_id = '$inv'");
		return ($inv, $gen, [ ch_log_since($since) ]);
	};
	my $digested_in = sub {
		my ($gen, $log) = @_;
		return scalar(grep { $_->{query} =~ /__dpwin_chunk.*sipHash128ReferenceKeyed.*FROM `\Q$db\E`\.`\Q$gen\E`/s } @$log);
	};

	# A merge of the target while the workers read the source: the parts
	# read before them are not the target's parts when it is cloned.  The
	# skipped chunks are digested again in the clone, and what was read of
	# the target meanwhile is not taken: the facts are read from the
	# generation.
	{
		psql_ok("UPDATE $schema.days SET v = 'changed during a merge' WHERE id = 130");
		my $pattern = "toInt64(toDate32(`w`)) AS __dpwin_day";
		my ($inv, $gen, $log) = $merge_while_held->('merged', $pattern,
			qr/\Q$pattern\E.* FROM `\Q$db\E`\.`days`/s,
			'the facts of the target\'s chunks are read while the workers run');
		is(psql_ok("SELECT string_agg(chunk_no || ':' || state, ',' ORDER BY chunk_no) FROM dpwin.chunks"
			  . " WHERE invocation_id = '$inv'"), '0:skipped,1:skipped,2:verified', 'merged: the changed chunk alone is re-staged');
		is($digested_in->($gen, $log), 1, 'merged: the skipped chunks are digested again in the clone');
		is(scalar(grep { $_->{query} =~ /^SELECT toJSONString\(.*FROM `\Q$db\E`\.`\Q$gen\E`/s } @$log), 1,
			'merged: the facts are read from the generation');
		my ($evidence, $target) = evidence_facts($inv, 'days', '2026-09-07 00:00:00', '2026-09-10 00:00:00');
		is($evidence, "false|$target", 'merged: and they are the target\'s');
	}

	# A merge of the target after its whole clone, while a worker still
	# runs: the clone cannot be narrowed (the target's parts are not those
	# cloned any more), so it is made again without the staged chunk, and
	# the skipped chunks are digested in it.
	{
		psql_ok("UPDATE $schema.days SET v = 'changed after the clone' WHERE id = 130");
		# a staging digest (the first statement checks that the function exists)
		my ($inv, $gen, $log) = $merge_while_held->('late merge',
			'SELECT count(), sum(reinterpretAsUInt64(sipHash128ReferenceKeyed',
			qr/sipHash128ReferenceKeyed.*_stg_2_/s, 'the staged chunk\'s digest is held',
			sub {
				ok(wait_logged($_[0], qr/^SELECT countIf\(.* FROM `\Q$db\E`\.`days`/s, answered => 1),
					'late merge: the whole target was cloned meanwhile');
			});
		is(scalar(grep { $_->{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q$gen\E`/ } @$log), 2,
			'late merge: the generation is cloned again');
		is(scalar(grep { $_->{query} =~ /DROP PARTITION/ } @$log), 0, 'late merge: and nothing is dropped from a clone');
		is($digested_in->($gen, $log), 1, 'late merge: the skipped chunks are digested in the new clone');
		is_deeply(ch_rows('days'), [ sort(@$w06[grep { $w06->[$_] ne $kept } 0 .. $#$w06],
					@{ $expect->('2026-09-07 00:00:00+00', $E2) }) ],
			'late merge: the target is the source\'s window, the day before it and the kept row');
		my ($evidence, $target) = evidence_facts($inv, 'days', '2026-09-07 00:00:00', '2026-09-10 00:00:00');
		is($evidence, "false|$target", 'late merge: the evidence\'s facts are the target\'s');
	}

	# the target's files change, its rows count the same: not trusted
	ch_ok("ALTER TABLE `$db`.`days` UPDATE v = 'tampered' WHERE id = 50 SETTINGS mutations_sync = 2");
	($cached, $skipped, $states, $digests) = $refresh->($E2);
	is("$cached/$skipped/$digests", '0/2/1', 'cache: changed parts are digested again by ClickHouse');
	is($states, '0:verified,1:skipped,2:skipped', 'cache: the tampered chunk was re-staged');
	is_deeply(ch_rows('days'), [ sort(@$w06[grep { $w06->[$_] ne $kept } 0 .. $#$w06],
				@{ $expect->('2026-09-07 00:00:00+00', $E2) }) ],
		'cache: the tampered row is the source\'s again');

	# A backup put back: the table of the publication before the last, the
	# same layout as the last (each of the two re-staged the same chunk),
	# other rows.  It is not the table the last publication published: not
	# trusted.
	my @inv;
	for my $v ('first', 'second')
	{
		psql_ok("UPDATE $schema.days SET v = '$v' WHERE id = 140");
		($cached, $skipped, $states, $digests, $inv[@inv]) = $refresh->($E2);
		is($states, '0:skipped,1:skipped,2:verified', "cache: '$v' re-staged chunk 2");
	}
	my ($l1, $l2) = map { psql_ok("SELECT metrics->'generation'->>'layout' FROM dpwin.evidence WHERE invocation_id = '$_'") } @inv;
	is($l1, $l2, 'cache: the two publications left the same layout');
	my $backup = psql_ok("SELECT backup_table FROM dpwin.publication WHERE invocation_id = '$inv[1]'");
	ch_ok("EXCHANGE TABLES `$db`.`days` AND `$db`.`$backup`");
	like(ch_ok("SELECT v FROM `$db`.`days` WHERE id = 140"), qr/^first$/, 'cache: the backup is the target again');
	($cached, $skipped, $states, $digests) = $refresh->($E2);
	is("$cached/$digests", '0/1', 'cache: another table with the same layout is digested by ClickHouse');
	is($states, '0:skipped,1:skipped,2:verified', 'cache: and its stale chunk re-staged');
	is_deeply(ch_rows('days'), [ sort(@$w06[grep { $w06->[$_] ne $kept } 0 .. $#$w06],
				@{ $expect->('2026-09-07 00:00:00+00', $E2) }) ],
		'cache: the target is the source\'s window again');

	# The last publication digested under dpwin 0.1's scheme (a key of four
	# numbers, two 64-bit SipHashes): its digests are not compared with the
	# current scheme's.  The refresh digests the target under a fresh
	# SipHash-128 key and still skips what did not change.
	my $last = psql_ok("SELECT e.invocation_id FROM dpwin.evidence e JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name = '$route' ORDER BY e.written_at DESC LIMIT 1");
	psql_ok("UPDATE dpwin.invocation SET plan = jsonb_set(plan, '{digest_key}', '\"1:2:3:4\"')"
		  . " WHERE invocation_id = '$last'");
	psql_ok("UPDATE $schema.days SET v = 'third' WHERE id = 140");
	# $inv: the refresh's invocation, as above
	($cached, $skipped, $states, $digests, $inv) = $refresh->($E2);
	is("$cached/$digests", '0/1', 'cache: digests of the older scheme are not taken; the target is digested');
	is($states, '0:skipped,1:skipped,2:verified', 'cache: and only the changed chunk re-staged');
	like(psql_ok("SELECT plan->>'digest_key' FROM dpwin.invocation WHERE invocation_id = '$inv'"),
		qr/^sip128:\d+:\d+$/, 'cache: under a fresh SipHash-128 key');
	drop_routes($route);
}

# The newest chunk first: a refresh that skips unchanged chunks compares
# (and, where they changed, stages) the newest first, so that a changed
# newest chunk, the common case, is staged while the older ones are
# compared.  One worker makes the order the journal's: chunks 0 and 2
# changed, 1 did not.
{
	my $route = "t075_order_$$";
	psql_ok("SELECT dpwin.create_route('$route', '$schema.days'::regclass, 'w', 'sandbox_ch', '$db', 'days',"
		  . " interval '3 days', interval '1 day', parallelism => 1, skip_unchanged => true)");
	my $E2 = '2026-09-10 00:00:00+00';
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E2')"), 'completed', 'order: a first refresh');
	psql_ok("UPDATE $schema.days SET v = 'newest first' WHERE id IN (50, 130)");
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E2')"), 'completed', 'order: a refresh after two chunks changed');
	my $inv = psql_ok("SELECT e.invocation_id FROM dpwin.evidence e JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name = '$route' ORDER BY e.written_at DESC LIMIT 1");
	is(psql_ok("SELECT string_agg(chunk_no || ':' || state, ',' ORDER BY started_at) FROM dpwin.chunks"
		  . " WHERE invocation_id = '$inv'"), '2:verified,1:skipped,0:verified',
		'order: the newest chunk was staged first, the oldest last');
	my $inside = ch_ok("SELECT concat(toString(id), '|', toString(toUnixTimestamp64Micro(w)), '|', ifNull(v, 'NULL'))"
		  . " FROM `$db`.`days` WHERE w >= '2026-09-07 00:00:00' AND w < '2026-09-10 00:00:00' FORMAT TSVRaw");
	is_deeply([ sort split /\n/, $inside ],
		[ sort split /\n/, psql_ok("SELECT id || '|' || ((extract(epoch FROM w) * 1000000)::bigint)::text || '|' || v"
				  . " FROM $schema.days WHERE w >= '2026-09-07 00:00:00+00' AND w < '$E2'") ],
		'order: the target\'s window is the source\'s');

	# A lightweight DELETE in the target: its minmax indexes can no longer
	# judge its partitions.  The whole clone judges none, the narrowing
	# does not read the window column to judge them (a new clone does
	# that): one scan of it in all.
	ch_ok("DELETE FROM `$db`.`days` WHERE id = 50");
	my $since = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$E2')"), 'completed', 'order: a refresh after a lightweight DELETE');
	my @scans = grep { $_->{query} =~ /force_optimize_projection = 0/ } ch_log_since($since);
	is(scalar(@scans), 1, 'order: the window column was read once to judge the partitions');
	$inside = ch_ok("SELECT concat(toString(id), '|', toString(toUnixTimestamp64Micro(w)), '|', ifNull(v, 'NULL'))"
		  . " FROM `$db`.`days` WHERE w >= '2026-09-07 00:00:00' AND w < '2026-09-10 00:00:00' FORMAT TSVRaw");
	is_deeply([ sort split /\n/, $inside ],
		[ sort split /\n/, psql_ok("SELECT id || '|' || ((extract(epoch FROM w) * 1000000)::bigint)::text || '|' || v"
				  . " FROM $schema.days WHERE w >= '2026-09-07 00:00:00+00' AND w < '$E2'") ],
		'order: the deleted row is back');
	drop_routes($route);
}

# --- a verification while a refresh holds the lease ----------------------------

{
	my $seq2 = ch_log_seq();
	# The refresh's EXCHANGE is held on the server: it holds the lease,
	# its intent journaled, while the verification runs.
	fault(pattern => "EXCHANGE TABLES `$db`.`full`", mode => 'hold', count => 1);
	my $h = bg_psql("SELECT state FROM dpwin_refresh('$full', '$E')");
	ok(wait_running(qr/^EXCHANGE TABLES `\Q$db\E`\.`full`/, 1, phase => 'holding'),
		'concurrent: the refresh is publishing, its EXCHANGE held');
	my ($rc, $out, $err) = psql("SELECT count(*) FILTER (WHERE matches) || '/' || count(*) FROM dpwin.verify('$full', '$E')");
	is($rc, 0, 'concurrent: verify is not blocked by the refresh\'s lease') or diag($err);
	is($out, '4/4', 'concurrent: every chunk matches');
	is(psql_ok("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%dpwin_refresh(''$full''%'"
		  . " AND pid <> pg_backend_pid()"), 1, 'concurrent: the verification finished while the refresh still ran');
	is(release("EXCHANGE TABLES `$db`.`full`"), 1, 'concurrent: the EXCHANGE is released');
	my ($rc2, $out2) = bg_finish($h);
	is($out2, "completed", 'concurrent: the refresh completes');
}

# --- privileges, before any I/O ------------------------------------------------------

psql_ok("DROP ROLE IF EXISTS t075_nobody; CREATE ROLE t075_nobody");
$seq = ch_log_seq();
like(psql_err("SET ROLE t075_nobody; SELECT * FROM dpwin.verify('$full', '$E')"), qr/^42501: permission denied for function verify/,
	'privileges: a role that is not an operator is refused with 42501');
like(psql_err("SELECT * FROM dpwin.verify('$full', '2026-09-09'::date)"), qr/^42804: interval_end must be timestamp with time zone, not date/,
	'a date is refused like dpwin.plan() refuses it');
like(psql_err("SELECT * FROM dpwin.verify('$full', NULL)"), qr/^22004: interval_end must not be NULL/,
	'a NULL interval_end is refused');
is(scalar(ch_log_since($seq)), 0, 'refusals send nothing to ClickHouse');
psql_ok("DROP ROLE t075_nobody");

drop_routes(@routes);
drop_fixture();
done_testing();
