# The crash matrix of the cloned build (src/generation.c), on a
# day-partitioned, a month-partitioned and an unpartitioned target: SIGKILL
# of the coordinator
#   clone     after the target was cloned into the generation (extracting);
#   delete    while the window is deleted from the clone (extracting);
#   attach    while the staged parts are attached (verified);
#   exchange  with the intent committed, the EXCHANGE held (publishing).
# Each time the target must be exactly the old or the new generation, and
# recovery -- or, where the snapshot died, a new invocation -- must finish
# with the new one and leave no table behind (test/lib/DpwinCrash.pm).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql ch_rows uuid_of after_refresh);
use DpwinCrash;
use DpwinEndpoint qw(release wait_running);

my $db = "t110_$$";
crash_setup($db);

my %shapes = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => "ORDER BY id");

sub start_e2
{
	my ($s) = @_;
	return bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
}

for my $shape (sort keys %shapes)
{
	# --- after the clone: the count of the target's kept rows held ---
	{
		my $s = scenario("clone_$shape", engine => $shapes{$shape});
		my $seq = ch_log_seq();
		my $gen = "$s->{prefix}gen";
		# the clone's count: each staging digest also counts, with countIf(
		fault(pattern => "SELECT countIf(", mode => 'hold', count => 1);
		my $h = start_e2($s);
		# (partitions that straddle the window go to a scratch table, gen_del)
		ok(wait_answered($seq, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E(_del)?` ATTACH .* FROM `\Q$db\E`\.`\Q$s->{t}\E`/s),
			"$s->{tag}: the target was cloned");
		ok(wait_running(qr/^SELECT countIf\(/, 1, phase => 'holding'), "$s->{tag}: the count of the clone waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		# The dead coordinator's statement still runs on the server; let it end.
		is(release('SELECT countIf('), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, qr/^SELECT countIf\(/), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired');
	}

	# --- while the window is deleted from the clone ---
	if ($shape eq 'day')
	{
		# A window of whole days: its partitions are left out of the clone,
		# and nothing is deleted.
		my $s = scenario("delete_$shape", engine => $shapes{$shape});
		my $seq = ch_log_seq();
		is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', "$s->{tag}: completed");
		is(scalar(grep { $_->{query} =~ /^DELETE FROM/ } ch_log_since($seq)), 0, "$s->{tag}: no DELETE was needed");
		is(psql_ok("SELECT metrics->'generation'->>'dropped_partitions' FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'"),
			1, "$s->{tag}: the window's day was not cloned");
		is_deeply(ch_rows($s->{t}), $s->{new}, "$s->{tag}: the target is the new generation");
	}
	else
	{
		my $s = scenario("delete_$shape", engine => $shapes{$shape});
		my $seq = ch_log_seq();
		my $gen = "$s->{prefix}gen";
		fault(pattern => "DELETE FROM `$db`.`${gen}_del`", mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_answered($seq, qr/countIf\(.*FROM `\Q$db\E`\.`\Q$s->{t}\E`/s), "$s->{tag}: the clone was counted");
		ok(wait_running(qr/^DELETE FROM `\Q$db\E`\.`\Q$gen\E_del`/, 1, phase => 'holding'),
			"$s->{tag}: the DELETE waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release("DELETE FROM `$db`.`${gen}_del`"), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, qr/^DELETE FROM `\Q$db\E`\.`\Q$gen\E_del`/), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired_new');
	}

	# --- while the staged parts are attached ---
	{
		my $s = scenario("attach_$shape", engine => $shapes{$shape});
		my $seq = ch_log_seq();
		my $gen = "$s->{prefix}gen";
		# (the statement that attaches a staged part names its partition
		# id, then the staging table)
		my $staged = "' FROM `$db`.`$s->{prefix}stg_";
		fault(pattern => $staged, mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_until(sub { state_of($s->{inv}) eq 'verified' }, 60), "$s->{tag}: verified");
		ok(wait_running(qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s, 1, phase => 'holding'),
			"$s->{tag}: the attach of the staged parts waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release($staged), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'verified', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(grep { $_->{query} =~ /FORMAT RowBinary/ } ch_log_since($seq)), 0,
			"$s->{tag}: recovery cloned again and published the staged chunks without extracting");
	}

	# --- the intent committed, the EXCHANGE held ---
	{
		my $s = scenario("exchange_$shape", engine => $shapes{$shape});
		my $seq = ch_log_seq();
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 60), "$s->{tag}: publishing");
		ok(wait_running(qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/, 1, phase => 'holding'),
			"$s->{tag}: the EXCHANGE waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release("EXCHANGE TABLES `$db`.`$s->{t}` AND"), 1, "$s->{tag}: released after the crash");
		# The held EXCHANGE runs on the server after its coordinator died.
		ok(wait_answered($seq, qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E`/), "$s->{tag}: the EXCHANGE has ended");
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		settle_and_check($s, 'recover');
	}
}

# --- a refresh that skips unchanged chunks, killed while the staged parts
# are attached: E2 was published once, then one row of its first chunk
# was added to the target behind dpwin's back, so only that chunk differs
# from the source.  Recovery clones again, checks the skipped chunks
# against the new clone and publishes what a full refresh would.
for my $shape (sort keys %shapes)
{
	my $s = scenario("skip_$shape", engine => $shapes{$shape}, skip => 1);
	is(psql_ok(refresh_sql($s->{route}, $E2)), 'completed', "$s->{tag}: window E2 published once");
	ch_ok("INSERT INTO `$db`.`$s->{t}` VALUES (9, '2026-09-08 01:00:00', 'added behind dpwin')");
	$s->{old} = ch_rows($s->{t});
	$s->{new} = after_refresh($s->{old}, $E2);
	$s->{pre_uuid} = uuid_of($s->{t});
	my $seq = ch_log_seq();
	my $gen = "$s->{prefix}gen";
	my $staged = "' FROM `$db`.`$s->{prefix}stg_";
	fault(pattern => $staged, mode => 'hold', count => 1);
	my $h = start_e2($s);
	ok(wait_running(qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s, 1, phase => 'holding'),
		"$s->{tag}: the attach of the staged parts waits on the server");
	is(state_of($s->{inv}), 'verified', "$s->{tag}: verified");
	is(psql_ok("SELECT string_agg(chunk_no || ':' || state, ',' ORDER BY chunk_no) FROM dpwin.chunk"
		  . " WHERE invocation_id = '$s->{inv}'"), '0:verified,1:skipped,2:skipped,3:skipped',
		"$s->{tag}: only the changed chunk was staged");
	crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
	is(release($staged), 1, "$s->{tag}: released after the crash");
	ok(wait_answered($seq, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s), "$s->{tag}: its last statement has ended");
	check_after_fault($s, which => 'old', state => 'verified', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ /FORMAT RowBinary/ } ch_log_since($seq)), 0,
		"$s->{tag}: recovery extracted nothing");
	is(psql_ok("SELECT metrics->>'skipped_chunks' FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'"), 3,
		"$s->{tag}: the evidence counts three skipped chunks");
}

crash_teardown();
done_testing();
