# The crash matrix, part 1: SIGKILL of the coordinator at each step of a
# refresh.  A SIGKILL of any backend makes the postmaster restart the whole
# cluster (crash recovery), as it would in production; each scenario waits
# for PostgreSQL to come back.  Fault points (test/lib/DpwinCrash.pm says
# what is checked after each):
#   planned       after the plan is journaled, during admission;
#   extracting    mid-extraction, staging INSERTs in flight;
#   staged        every chunk staged and journaled, the invocation not yet;
#   verified      staged and verified journaled, the staged parts being
#                 attached to the generation;
#   intent        the publication intent committed, the EXCHANGE never ran;
#   exchanged     the EXCHANGE ran, its outcome not yet journaled;
#   published     outcome journaled, the evidence transaction not committed;
#   evidenced     evidence committed, route_state not yet advanced;
#   overtaken     the same, and a newer window completes before recovery;
#   completed     completed, its staging tables not yet dropped.
# 062_recovery.t covers a kill while the EXCHANGE itself runs and while the
# generation is being filled.  The two publication cases (intent,
# exchanged: a lost reply) run with the endpoint in both query_id modes
# (docs/endpoint.md, "Query ids").  Statements that must still be running when
# the coordinator dies are holds (docs/endpoint.md): they run on the server
# until the test releases them, so no step waits on a timer.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish ch_rows uuid_of replace_by_copy micros after_refresh);
use DpwinCrash;
use DpwinEndpoint qw(both_modes release wait_running);

my $db = "t100_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);
my $evkey = 100_000 + $$ % 100_000;
held_evidence_function($db, $evkey);

# Start the E2 refresh of scenario $s in the background.
sub start_e2
{
	my ($s) = @_;
	return bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
}

sub wait_state
{
	my ($s, $state) = @_;
	ok(wait_until(sub { state_of($s->{inv}) eq $state }, 60), "$s->{tag}: the invocation reached $state")
	  or diag(state_of($s->{inv}));
}

# --- after planning ------------------------------------------------------------

{
	my $s = scenario('planned');
	fault(pattern => "FROM system.databases WHERE name = '$db'", mode => 'hold', count => 1);
	my $h = start_e2($s);
	wait_state($s, 'planned');
	ok(wait_running(qr/FROM system\.databases WHERE name = '\Q$db\E'/, 1, phase => 'holding'),
		'planned: admission waits on the server');
	crash([ coordinator_pid($s->{inv}) ], $h, 'planned');
	release("FROM system.databases WHERE name = '$db'");
	check_after_fault($s, which => 'old', state => 'planned', outcome => '');
	settle_and_check($s, 'expired');
}

# --- in the EXCHANGE probe: its scratch tables carry the invocation's prefix,
# and recovery drops them with the rest.  E1's generation in place would
# spare E2 the probe: the target is first replaced by a copy of itself. ---------

{
	my $s = scenario('probe');
	replace_by_copy($s->{t});
	# earlier refreshes probed the database: forget it, as a restart would
	psql_ok("SELECT dpwin_test.forget_exchange_probe('sandbox_ch', '$db')");
	$s->{pre_uuid} = uuid_of($s->{t});
	my $pat = "EXCHANGE TABLES `$db`.`$s->{prefix}probe_";
	fault(pattern => $pat, mode => 'hold', count => 1);
	my $h = start_e2($s);
	ok(wait_running(qr/^\Q$pat\E/, 1, phase => 'holding'), 'probe: the EXCHANGE probe waits on the server');
	my @probe = grep { /^\Q$s->{prefix}\Eprobe_[0-9a-f]{16}_[ab]$/ } @{ leftovers() };
	is(scalar(@probe), 2, 'probe: its two scratch tables carry the invocation\'s prefix');
	crash([ coordinator_pid($s->{inv}) ], $h, 'extracting');
	release($pat);
	is_deeply([ grep { /probe_/ } @{ leftovers() } ], \@probe, 'probe: the killed coordinator left them');
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	settle_and_check($s, 'expired');
}

# --- mid-extraction ----------------------------------------------------------------

{
	my $s = scenario('extracting');
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'hold', count => 4);
	my $h = start_e2($s);
	wait_state($s, 'extracting');
	ok(wait_until(sub { chunks_in_state($s, 'running') == 2 }, 30),
		'extracting: two chunks are being loaded');
	ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/, 2, phase => 'holding'),
		'extracting: their INSERTs are on the server');
	crash([ coordinator_pid($s->{inv}) ], $h, 'extracting');
	release("INSERT INTO `$db`.`$s->{prefix}stg_");
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	settle_and_check($s, 'expired');
}

# --- every chunk staged, the invocation not yet --------------------------------------

{
	my $s = scenario('staged');
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'hold', count => 4);
	my $h = start_e2($s);
	wait_state($s, 'extracting');
	# The staged transition waits for this row lock; chunk receipts do not.
	my $lk = hold_locks("SELECT 1 FROM dpwin.invocation WHERE invocation_id = '$s->{inv}' FOR NO KEY UPDATE");
	ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/, 2, phase => 'holding'),
		'staged: the first INSERTs wait on the server until the lock is held');
	is(release("INSERT INTO `$db`.`$s->{prefix}stg_"), 2, 'staged: released');
	ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/, 2, phase => 'holding'),
		'staged: the last two INSERTs wait on the server');
	# a worker reads a chunk's digest once it has loaded its next chunk
	is(chunks_in_state($s, 'verified'), 0, 'staged: no receipt yet while the next chunks load');
	is(release("INSERT INTO `$db`.`$s->{prefix}stg_"), 2, 'staged: released as well');
	my $pid = coordinator_pid($s->{inv});
	ok(wait_until(sub { chunks_in_state($s, 'verified') == 4 && waits_on_lock($pid) }, 30),
		'staged: all four chunks staged and verified, the coordinator waits to journal it');
	crash([$pid], $h, 'staged');
	bg_finish($lk);
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	is(chunks_in_state($s, 'verified'), 4, 'staged: the chunk journal has every receipt');
	settle_and_check($s, 'expired');
}

# --- staged and verified, the staged parts being attached ------------------------------

{
	my $s = scenario('verified');
	my $seq = ch_log_seq();
	my $gen = "$s->{prefix}gen";
	# hold the ATTACH of the staged parts (verified): it names a partition
	# id, then a staging table
	my $staged = "' FROM `$db`.`$s->{prefix}stg_";
	fault(pattern => $staged, mode => 'hold', count => 1);
	my $h = start_e2($s);
	wait_state($s, 'verified');
	ok(wait_running(qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s, 1, phase => 'holding'),
		'verified: the attach of the staged parts waits on the server');
	crash([ coordinator_pid($s->{inv}) ], $h, 'verified');
	# The dead coordinator's ATTACH still runs on the server; let it end.
	is(release($staged), 1, 'verified: released after the crash');
	ok(wait_answered($seq, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH .*_stg_/s), 'verified: its last statement has ended');
	check_after_fault($s, which => 'old', state => 'verified', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ /FORMAT RowBinary/ } ch_log_since($seq)), 0,
		'verified: recover published the staged chunks without extracting again');
}

both_modes(sub {
	my ($mode) = @_;
	my $m = substr($mode, 0, 1);

	# --- the publication intent committed, the EXCHANGE never ran ---------------------------

	{
		my $s = scenario("intent_$m");
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'publishing');
		ok(wait_running(qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/, 1, phase => 'holding'),
			"$s->{tag}: the EXCHANGE waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		# The EXCHANGE is still held by the endpoint: a restart drops it unrun.
		sandbox_cmd('restart-ch');
		check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
		like(psql_err(refresh_sql($s->{route}, $E2)), qr/^55006: invocation \Q$s->{inv}\E of this target has an unsettled publication/,
			"$s->{tag}: a new invocation is refused until it is settled");
		my $seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(grep { $_->{query} =~ /^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/ } ch_log_since($seq)), 1,
			"$s->{tag}: recover ran the one EXCHANGE");
	}

	# --- the EXCHANGE ran, its outcome not journaled ----------------------------------------

	{
		my $s = scenario("exchanged_$m");
		my $seq = ch_log_seq();
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'publishing');
		# Recording the outcome waits for this row lock.
		my $lk = hold_locks("SELECT 1 FROM dpwin.publication WHERE invocation_id = '$s->{inv}' FOR UPDATE");
		ok(wait_running(qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/, 1, phase => 'holding'),
			"$s->{tag}: the EXCHANGE waits on the server");
		is(release("EXCHANGE TABLES `$db`.`$s->{t}` AND"), 1, "$s->{tag}: the EXCHANGE is released once the lock is held");
		my $pid = coordinator_pid($s->{inv});
		ok(wait_answered($seq, qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/), "$s->{tag}: the EXCHANGE was answered");
		ok(wait_until(sub { waits_on_lock($pid) }, 30), "$s->{tag}: the coordinator waits to journal the outcome");
		crash([$pid], $h, $s->{tag});
		bg_finish($lk);
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(grep { $_->{query} =~ /^EXCHANGE|FORMAT RowBinary/ } ch_log_since($seq)), 0,
			"$s->{tag}: recover neither exchanged nor extracted");
	}
});

# --- outcome journaled, evidence not committed ---------------------------------------------

{
	my $s = scenario('published', evidence => "$db.record_evidence(uuid,jsonb)");
	# The route's evidence function waits for this advisory lock.
	my $lk = hold_locks("SELECT pg_advisory_xact_lock($evkey)");
	my $h = start_e2($s);
	wait_state($s, 'published');
	my $pid = coordinator_pid($s->{inv});
	ok(wait_until(sub { waits_on_lock($pid) }, 30), 'published: the evidence function waits');
	crash([$pid], $h, 'published');
	bg_finish($lk);
	check_after_fault($s, which => 'new', state => 'published', outcome => 'published');
	is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'")
		  . psql_ok("SELECT count(*) FROM $db.ev_log WHERE invocation_id = '$s->{inv}'"), '00',
		'published: no evidence, in dpwin or the evidence function');
	settle_and_check($s, 'recover');
	is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'")
		  . psql_ok("SELECT count(*) FROM $db.ev_log WHERE invocation_id = '$s->{inv}'"), '11',
		'published: recover wrote the evidence once, with the evidence function');
}

# --- evidence committed, route_state not advanced ------------------------------------------

{
	my $s = scenario('evidenced');
	my $lk = hold_locks("SELECT 1 FROM dpwin.route_state WHERE route_id = $s->{rid} FOR UPDATE");
	my $h = start_e2($s);
	wait_state($s, 'evidenced');
	my $pid = coordinator_pid($s->{inv});
	ok(wait_until(sub { waits_on_lock($pid) }, 30), 'evidenced: the coordinator waits to advance route_state');
	crash([$pid], $h, 'evidenced');
	bg_finish($lk);
	check_after_fault($s, which => 'new', state => 'evidenced', outcome => 'published');
	is(route_state($s->{route}), micros($E1), 'evidenced: route_state still E1');
	settle_and_check($s, 'recover');
	is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'"), 1,
		'evidenced: one evidence row');
}

# --- evidence committed, then a newer window completes first ------------------------------
#
# The crashed invocation's publication is settled, so a newer window may be
# refreshed before it is recovered; recovering the older one afterwards
# must not move route_state back, nor touch the target.

{
	my $s = scenario('overtaken');
	my $E3 = '2026-09-10 00:00:00+00';
	my $lk = hold_locks("SELECT 1 FROM dpwin.route_state WHERE route_id = $s->{rid} FOR UPDATE");
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	wait_state($s, 'evidenced');
	my $pid = coordinator_pid($s->{inv});
	ok(wait_until(sub { waits_on_lock($pid) }, 30), 'overtaken: the coordinator waits to advance route_state');
	crash([$pid], $h, 'overtaken');
	bg_finish($lk);
	check_after_fault($s, which => 'new', state => 'evidenced', outcome => 'published');
	is(psql_ok(refresh_sql($s->{route}, $E3)), 'completed', 'overtaken: window E3 completes meanwhile');
	my $after_e3 = after_refresh($s->{new}, $E3);
	is_deeply(ch_rows($s->{t}), $after_e3, 'overtaken: the target is E3\'s generation');
	is(route_state($s->{route}), micros($E3), 'overtaken: route_state is E3');
	check_route_state($s, 'overtaken: after E3');
	my $uuid = uuid_of($s->{t});
	is(psql_ok("SELECT state FROM dpwin.recover('$s->{inv}')"), 'completed', 'overtaken: (c) recover completes E2');
	is(route_state($s->{route}), micros($E3), 'overtaken: (e) route_state stays E3');
	check_route_state($s, 'overtaken: after recover');
	is_deeply(ch_rows($s->{t}), $after_e3, 'overtaken: the target is still E3\'s generation');
	is(uuid_of($s->{t}), $uuid, 'overtaken: the same table');
	is_deeply(leftovers(), [], 'overtaken: (d) no staging or generation table is left');
}

# --- completed, its staging tables not yet dropped ------------------------------------------

{
	my $s = scenario('completed');
	my $stg = "$s->{prefix}stg_0_0";
	# The first DROP of that table drops every staging table at once,
	# beside the RENAME to the backup; the clean-up waits for it.
	fault(pattern => "DROP TABLE IF EXISTS `$db`.`$stg`", mode => 'hold', count => 1);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	wait_state($s, 'completed');
	ok(wait_running(qr/^DROP TABLE IF EXISTS `\Q$db\E`\.`\Q$stg\E`/, 1, phase => 'holding'),
		'completed: the clean-up\'s first DROP waits on the server');
	crash([ coordinator_pid($s->{inv}) ], $h, 'completed');
	release("DROP TABLE IF EXISTS `$db`.`$stg`");
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	settle_and_check($s, 'recover');
}

crash_teardown();
done_testing();
