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
use DpwinFixture qw(fault bg_psql ch_rows);
use DpwinCrash;
use Time::HiRes qw(usleep);

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
		fault(pattern => "countIf(", mode => 'delay', ms => 2500, count => 1);
		my $h = start_e2($s);
		# (partitions that straddle the window go to a scratch table, gen_del)
		ok(wait_answered($seq, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E(_del)?` ATTACH .* FROM `\Q$db\E`\.`\Q$s->{t}\E`/s),
			"$s->{tag}: the target was cloned");
		usleep(200_000);
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		ok(wait_answered($seq, qr/countIf\(/), "$s->{tag}: its last statement has ended");
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
		fault(pattern => "DELETE FROM `$db`.`${gen}_del`", mode => 'delay', ms => 2500, count => 1);
		my $h = start_e2($s);
		ok(wait_answered($seq, qr/countIf\(.*FROM `\Q$db\E`\.`\Q$s->{t}\E`/s), "$s->{tag}: the clone was counted");
		usleep(200_000);
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		ok(wait_answered($seq, qr/^DELETE FROM `\Q$db\E`\.`\Q$gen\E_del`/), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired_new');
	}

	# --- while the staged parts are attached ---
	{
		my $s = scenario("attach_$shape", engine => $shapes{$shape});
		my $seq = ch_log_seq();
		my $gen = "$s->{prefix}gen";
		fault(pattern => "ALTER TABLE `$db`.`$gen` ATTACH", mode => 'delay', ms => 1, count => 1);
		fault(pattern => "ALTER TABLE `$db`.`$gen` ATTACH", mode => 'delay', ms => 2500, count => 1);
		my $h = start_e2($s);
		ok(wait_until(sub { state_of($s->{inv}) eq 'verified' }, 60), "$s->{tag}: verified");
		usleep(200_000);
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
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
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'delay', ms => 2500, count => 1);
		my $h = start_e2($s);
		ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 60), "$s->{tag}: publishing");
		usleep(200_000);
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		# The held EXCHANGE runs on the server after its coordinator died.
		ok(wait_answered($seq, qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E`/), "$s->{tag}: the EXCHANGE has ended");
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		settle_and_check($s, 'recover');
	}
}

crash_teardown();
done_testing();
