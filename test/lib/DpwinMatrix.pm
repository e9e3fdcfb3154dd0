package DpwinMatrix;

# The fault matrix: every fault class of 100_crash_coordinator.t to
# 106_idle_connections.t and 110_crash_shapes.t, and the steps of a refresh
# that skips unchanged chunks, applied to one target
# shape (day-partitioned, month-partitioned or unpartitioned) in both
# query_id modes of the endpoint (docs/endpoint.md, "Query ids").
# 111_fault_matrix_day.t, 112_fault_matrix_month.t and
# 113_fault_matrix_flat.t each run one shape.
#
# Every case is one faulted refresh of window E2 of a scenario of its own
# (test/lib/DpwinCrash.pm): after the fault the target is exactly the old
# or exactly the new generation -- full row multisets compared with the
# source window computed in PostgreSQL -- the journal says which, and
# recover() (or, where the snapshot died, a new invocation) ends with the
# new generation and no table left behind.  Slow statements are holds:
# every wait is on the query log, /running, pg_stat_activity or a held
# lock, never on a timer, except the request_timeout cases, where only
# the held statement can outlast the timeout.
#
# Server-grade faults (docs/endpoint.md, "Fidelity ledger"): the EXCHANGE
# committed with its reply lost, and the same across a restart;
# statements that ignore KILL QUERY (mode=stubborn) at the build's attach
# of the staged parts, the EXCHANGE, the backup RENAME, the clean-up's
# DROP of the staging tables and a staging INSERT, which then completes
# after its client timed out; a restart that lets such a statement finish; the
# settling question unanswered.  Every case checks at its end that each
# endpoint fault it registered fired (check_fired); a case whose outcome
# depends on timing records the branch it took (hedge), and check.sh
# counts them.
#
# DPWIN_FAULT_MATRIX selects the size:
#   full  (default) every case in both modes;
#   slice every case once, in one mode, alternating visible and hidden
#         from case to case and from shape to shape (about half).

use strict;
use warnings;
use Exporter 'import';
use Test::More;
use DpwinTest;
use DpwinFixture qw(bg_psql bg_finish ch_rows uuid_of after_refresh exchange_re exchanges
  hold_source release_source workers_held);
use DpwinCrash;
use DpwinEndpoint qw(set_query_ids release running wait_running log_entries faults_pending holds
  only_held_timed_out wait_logged);

our @EXPORT = qw(run_matrix);

our %ENGINES = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => "ORDER BY id");

my ($db, $shape, $mode, $m);
my ($slow, $lp, $evkey);
my %count;       # "shape mode" -> faulted refreshes
my %kinds;       # fault kind -> faulted refreshes
my @registered;  # the endpoint faults of the running case
my %hedged;      # "case branch" -> times taken

# Register an endpoint fault (DpwinFixture::fault), remembered so that the
# end of the case can check that it fired.
sub fault_checked
{
	my (%f) = @_;
	push @registered, {%f};
	return DpwinFixture::fault(%f);
}

# Every endpoint fault the case registered fired: the endpoint spent it
# (GET /faults no longer lists all of its count), or for refused
# connections, the query log shows one since the case began.  A case
# whose fault did not fire fails.  The faults left are cleared.
sub check_fired
{
	my ($name, $seq) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my %pending;
	for (faults_pending())
	{
		my ($md, $n, $pat) = split /\t/, $_, 3;
		$pending{"$md\t" . DpwinEndpoint::unescape($pat // '')} += $n;
	}
	for my $f (@registered)
	{
		my $what = "$name ($shape, $mode): its $f->{mode} fault fired";
		if ($f->{mode} eq 'refuse')
		{
			ok(scalar(grep { $_->{status} eq 'refused' } log_entries($seq)), "$what (a refused connection)");
			next;
		}
		my $left = $pending{"$f->{mode}\t$f->{pattern}"} // 0;
		ok($left < ($f->{count} // 1), "$what (pattern '$f->{pattern}')") or diag("$left of $f->{count} left");
	}
	ch_control('POST', '/faults/clear');
	@registered = ();
}

# A case whose branch depends on timing: recorded (DpwinEndpoint::hedge)
# and counted for the summary line.
sub hedge_counted
{
	my ($case, $branch) = @_;
	$hedged{"$case $branch"}++;
	DpwinEndpoint::hedge($case, $branch);
}

sub new_s
{
	my ($case, %o) = @_;
	return scenario("${case}_$m", engine => $ENGINES{$shape}, %o);
}

sub start_e2
{
	my ($s) = @_;
	$count{"$shape $mode"}++;
	return bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
}

# start_caller, counted
sub matrix_caller
{
	$count{"$shape $mode"}++;
	return start_caller(@_);
}

# A faulted refresh run in the foreground: (rc, out, err).
sub run_e2
{
	my ($s) = @_;
	$count{"$shape $mode"}++;
	return psql("\\set VERBOSITY verbose\n" . refresh_sql($s->{route}, $E2, $s->{inv}));
}

sub wait_state
{
	my ($s, $state) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(wait_until(sub { state_of($s->{inv}) eq $state }, 60), "$s->{tag}: the invocation reached $state")
	  or diag(state_of($s->{inv}));
}

sub staged_attach_pattern { my ($s) = @_; return "' FROM `$db`.`$s->{prefix}stg_"; }
sub staged_attach_re { my ($s) = @_; return qr/^ALTER TABLE `\Q$db\E`\.`\Q$s->{prefix}gen\E` ATTACH .*_stg_/s; }
sub xpat { my ($s) = @_; return "EXCHANGE TABLES `$db`.`$s->{t}` AND"; }
sub stg_pat { my ($s) = @_; return "INSERT INTO `$db`.`$s->{prefix}stg_"; }
sub stg_re { my ($s) = @_; return qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/; }

sub restart_pg_lost
{
	my ($h, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	sandbox_cmd('restart-pg');
	my ($rc, $out, $err) = bg_finish($h);
	like($err, qr/server closed the connection|terminating connection|connection to server was lost/,
		"$label: the caller lost its connection") or diag($err);
	ok(wait_until(\&pg_up, 60), "$label: PostgreSQL is back");
}




# A scenario whose route skips unchanged chunks: E2 published once, then
# $rows added to the target behind dpwin's back, so that the chunks they
# fall in differ from the source and are staged again while the others are
# skipped; the old generation is the target with those rows.
sub new_skip_s
{
	my ($case, $rows) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $s = new_s($case, skip => 1);
	is(psql_ok(refresh_sql($s->{route}, $E2)), 'completed', "$s->{tag}: window E2 published once");
	ch_ok("INSERT INTO `$db`.`$s->{t}` VALUES $rows");
	$s->{old} = ch_rows($s->{t});
	$s->{new} = after_refresh($s->{old}, $E2);
	$s->{pre_uuid} = uuid_of($s->{t});
	return $s;
}

# PostgreSQL restarts once $n staging INSERTs of scenario $s are held on
# the server (of up to $hold held): the snapshot dies with the refresh, the
# target is the old generation, and a new invocation publishes the new one.
sub restart_pg_while_staging
{
	my ($s, $hold, $n, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	fault_checked(pattern => stg_pat($s), mode => 'hold', count => $hold);
	my $h = start_e2($s);
	ok(wait_running(stg_re($s), $n, phase => 'holding'), "$s->{tag}: $what");
	restart_pg_lost($h, $s->{tag});
	release(stg_pat($s));
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	settle_and_check($s, 'expired');
}

# The coordinator of scenario $s's E2 refresh is killed while the statement
# that contains $pat (and matches $re) is held on the server, before the
# snapshot is journaled; released, it ends, the target is the old
# generation, and a new invocation publishes the new one.  $before->()
# runs once the statement is held.
sub kill_while_extracting
{
	my ($s, $pat, $re, $what, $before) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $seq = ch_log_seq();
	fault_checked(pattern => $pat, mode => 'hold', count => 1);
	my $h = start_e2($s);
	ok(wait_running($re, 1, phase => 'holding'), "$s->{tag}: $what");
	$before->() if $before;
	crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
	is(release($pat), 1, "$s->{tag}: released after the crash");
	ok(wait_answered($seq, $re), "$s->{tag}: its last statement has ended");
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	settle_and_check($s, 'expired');
}

# A ClickHouse restart met by dpwin's next statement: the stopping server
# drops the connection (08006), or the stopped one refuses it (HV00N),
# whichever the timing gives.
my $server_gone = qr/(?:08006: lost the connection|HV00N: could not connect) to ClickHouse server /;

# The same restart met later: the server is back but, still starting on a
# loaded machine, does not answer within the request timeout (08006).  The
# restart cases whose next statement settles a publication record it as a
# branch of its own.
my $server_slow = qr/08006: ClickHouse server "[^"]+" did not answer in time /;

# The branch a restart case took: the refresh completed, or its next
# statement met the server gone ($gone names that branch) or slow.
sub restart_branch
{
	my ($out, $err, $gone) = @_;
	return 'completed' if $out eq 'completed';
	return $err =~ /ERROR:\s+$server_slow/ ? 'server_slow' : $gone;
}

# After an EXCHANGE that ran and lost its reply ($out, $err: the refresh's
# result; $seq: the log before it): dpwin reads the target's UUID, finds
# the generation of its intent there and completes, in either query-id
# mode.  After a restart it may find the server not back within its
# settling and retrying time, gone or too slow to answer (recorded
# branches): it stops publishing, names recover(), and recover()
# completes.  Either way the target is exactly the new generation and no
# EXCHANGE is sent again.
sub x_committed_then
{
	my ($s, $out, $err, $seq, $restarted) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	hedge_counted("x_lost_restart/$mode", restart_branch($out, $err, 'server_late')) if $restarted;
	if ($out eq 'completed' || !$restarted)
	{
		is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	}
	else
	{
		like($err, qr/ERROR:\s+(?:$server_gone|$server_slow).*HINT:\s+The invocation is publishing; .*dpwin\.recover\('\Q$s->{inv}\E'\)/s,
			"$s->{tag}: or the refresh fails, the server not back in time, naming recover()") or diag($err);
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	}
	my $seq2 = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(exchanges($seq2, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
	is(psql_ok("SELECT count(*) FROM dpwin.publication WHERE invocation_id = '$s->{inv}' AND outcome = 'published'"),
		1, "$s->{tag}: published once");
}

# The statuses of the EXCHANGEs of table $t in the endpoint's log file,
# which outlives its restarts (GET /log starts again with each).
sub exchanges_in_log_file
{
	my ($t) = @_;
	return statuses_in_log_file(exchange_re($t));
}

# The statuses of the statements matching $re in the endpoint's log file.
sub statuses_in_log_file
{
	my ($re) = @_;
	open(my $fh, '<', "$ENV{DPWIN_SANDBOX}/ch_queries.log") or die "ch_queries.log: $!";
	my @st;
	while (my $l = <$fh>)
	{
		chomp $l;
		my (undef, undef, undef, undef, $status, $query) = split /\t/, $l, 6;
		push @st, $status if defined $query && DpwinEndpoint::unescape($query) =~ $re;
	}
	close($fh);
	return @st;
}

# After a restart of ClickHouse while the EXCHANGE ran and was answered:
# dpwin's next statement, which reads the target's UUID, meets the server
# down (it is answered while the server stops), or back but too slow to
# answer in time, and dpwin stops publishing for recover() -- or, if the
# server is back and answers, completes (recorded branches).
sub after_restart_published
{
	my ($s, $out, $err) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	hedge_counted("x_stubborn_restart/$mode", restart_branch($out, $err, 'server_down'));
	if ($out eq 'completed')
	{
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	}
	else
	{
		like($err, qr/ERROR:\s+(?:$server_gone|$server_slow).*HINT:\s+The invocation is publishing; .*dpwin\.recover\('\Q$s->{inv}\E'\)/s,
			"$s->{tag}: or the refresh stops after the EXCHANGE, the server down or slow, naming recover()") or diag($err);
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	}
	settle_and_check($s, 'recover');
}

# A statement of step $step (its log matching $re) ignored dpwin's KILL
# QUERY after request_timeout: in the visible mode dpwin settles it, and
# its KILL QUERY ... SYNC still waits on the server when the refresh gives
# up ($err); with hidden query ids dpwin sends no KILL.
sub stubborn_outlived
{
	my ($s, $err, $step, $re) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($qid) = map { $_->{query_id} } grep { $_->{query} =~ $re } running();
	if ($mode eq 'visible')
	{
		like($err, qr/ERROR:\s+08006: .*did not answer in time while settling query \Q$qid\E/,
			"$s->{tag}: the refresh gives up settling its $step statement") or diag($err);
		ok(scalar(grep { $_->{query} =~ /^KILL QUERY WHERE query_id = '\Q$qid\E' SYNC/ } running()),
			"$s->{tag}: dpwin's KILL QUERY ... SYNC still waits on the server");
	}
	else
	{
		like($err, qr/ERROR:\s+08006: /, "$s->{tag}: the refresh fails: its $step statement got no answer") or diag($err);
		is(scalar(grep { $_->{query} =~ /^KILL QUERY/ } running()), 0, "$s->{tag}: no KILL QUERY was sent");
	}
}

sub none_held
{
	my ($s) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(scalar(grep { index($_->{query}, $s->{prefix}) >= 0 } running()), 0,
		"$s->{tag}: none of its statements is still running on the server");
}

# ---- the cases: name => code, each one faulted refresh ----------------------

our @CASES = (

	# --- SIGKILL of the coordinator (100, 110) ---

	[ planned => sub {
		my $s = new_s('planned');
		fault_checked(pattern => "FROM system.databases WHERE name = '$db'", mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'planned');
		ok(wait_running(qr/FROM system\.databases WHERE name = '\Q$db\E'/, 1, phase => 'holding'),
			"$s->{tag}: admission waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		release("FROM system.databases WHERE name = '$db'");
		check_after_fault($s, which => 'old', state => 'planned', outcome => '');
		settle_and_check($s, 'expired');
	} ],

	[ clone => sub {
		my $s = new_s('clone');
		my $seq = ch_log_seq();
		my $gen = "$s->{prefix}gen";
		# the clone's count: each staging digest also counts, with countIf(
		fault_checked(pattern => "SELECT countIf(", mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_answered($seq, qr/^ALTER TABLE `\Q$db\E`\.`\Q$gen\E(_del)?` ATTACH .* FROM `\Q$db\E`\.`\Q$s->{t}\E`/s),
			"$s->{tag}: the target was cloned");
		ok(wait_running(qr/^SELECT countIf\(/, 1, phase => 'holding'), "$s->{tag}: the count of the clone waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release('SELECT countIf('), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, qr/^SELECT countIf\(/), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired');
	} ],

	[ delete => sub {
		# a window of whole days is left out of a day-partitioned clone:
		# nothing to delete there
		return if $shape eq 'day';
		my $s = new_s('delete');
		my $seq = ch_log_seq();
		my $del = "DELETE FROM `$db`.`$s->{prefix}gen_del`";
		fault_checked(pattern => $del, mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_running(qr/^\Q$del\E/, 1, phase => 'holding'), "$s->{tag}: the DELETE waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release($del), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, qr/^\Q$del\E/), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired_new');
	} ],

	[ kill_extracting => sub {
		my $s = new_s('kxtr');
		fault_checked(pattern => stg_pat($s), mode => 'hold', count => 4);
		my $h = start_e2($s);
		ok(wait_running(stg_re($s), 2, phase => 'holding'), "$s->{tag}: two staging INSERTs are on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		release(stg_pat($s));
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired');
	} ],

	[ kill_verified => sub {
		my $s = new_s('kver');
		my $seq = ch_log_seq();
		fault_checked(pattern => staged_attach_pattern($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'verified');
		ok(wait_running(staged_attach_re($s), 1, phase => 'holding'),
			"$s->{tag}: the attach of the staged parts waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release(staged_attach_pattern($s)), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, staged_attach_re($s)), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'verified', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(grep { $_->{query} =~ /FORMAT RowBinary/ } ch_log_since($seq)), 0,
			"$s->{tag}: recover published the staged chunks without extracting again");
	} ],

	[ kill_intent => sub {
		my $s = new_s('kint');
		fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'publishing');
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		# the EXCHANGE is still held by the endpoint: a restart cancels it unrun
		sandbox_cmd('restart-ch');
		check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
		my $seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 1, "$s->{tag}: recover ran the one EXCHANGE");
	} ],

	[ kill_exchange => sub {
		# the held EXCHANGE runs on the server after its coordinator died
		my $s = new_s('kxch');
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'publishing');
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		is(release(xpat($s)), 1, "$s->{tag}: released after the crash");
		ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: the EXCHANGE has ended");
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
	} ],

	[ kill_exchanged => sub {
		my $s = new_s('kxd');
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'publishing');
		my $lk = hold_locks("SELECT 1 FROM dpwin.publication WHERE invocation_id = '$s->{inv}' FOR UPDATE");
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		is(release(xpat($s)), 1, "$s->{tag}: the EXCHANGE is released once the lock is held");
		my $pid = coordinator_pid($s->{inv});
		ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: the EXCHANGE was answered");
		ok(wait_until(sub { waits_on_lock($pid) }, 30), "$s->{tag}: the coordinator waits to journal the outcome");
		crash([$pid], $h, $s->{tag});
		bg_finish($lk);
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(grep { $_->{query} =~ /^EXCHANGE|FORMAT RowBinary/ } ch_log_since($seq)), 0,
			"$s->{tag}: recover neither exchanged nor extracted");
	} ],

	[ kill_published => sub {
		my $s = new_s('kpub', evidence => "$db.record_evidence(uuid,jsonb)");
		my $lk = hold_locks("SELECT pg_advisory_xact_lock($evkey)");
		my $h = start_e2($s);
		wait_state($s, 'published');
		my $pid = coordinator_pid($s->{inv});
		ok(wait_until(sub { waits_on_lock($pid) }, 30), "$s->{tag}: the evidence function waits");
		crash([$pid], $h, $s->{tag});
		bg_finish($lk);
		check_after_fault($s, which => 'new', state => 'published', outcome => 'published');
		settle_and_check($s, 'recover');
		is(psql_ok("SELECT count(*) FROM dpwin.evidence WHERE invocation_id = '$s->{inv}'")
			  . psql_ok("SELECT count(*) FROM $db.ev_log WHERE invocation_id = '$s->{inv}'"), '11',
			"$s->{tag}: recover wrote the evidence once, with the evidence function");
	} ],

	[ kill_evidenced => sub {
		my $s = new_s('kevd');
		my $lk = hold_locks("SELECT 1 FROM dpwin.route_state WHERE route_id = $s->{rid} FOR UPDATE");
		my $h = start_e2($s);
		wait_state($s, 'evidenced');
		my $pid = coordinator_pid($s->{inv});
		ok(wait_until(sub { waits_on_lock($pid) }, 30), "$s->{tag}: the coordinator waits to advance route_state");
		crash([$pid], $h, $s->{tag});
		bg_finish($lk);
		check_after_fault($s, which => 'new', state => 'evidenced', outcome => 'published');
		settle_and_check($s, 'recover');
	} ],

	[ kill_completed => sub {
		my $s = new_s('kcmp');
		my $stg = "$s->{prefix}stg_0_0";
		fault_checked(pattern => "DROP TABLE IF EXISTS `$db`.`$stg`", mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'completed');
		ok(wait_running(qr/^DROP TABLE IF EXISTS `\Q$db\E`\.`\Q$stg\E`/, 1, phase => 'holding'),
			"$s->{tag}: the clean-up's first DROP waits on the server");
		crash([ coordinator_pid($s->{inv}) ], $h, $s->{tag});
		release("DROP TABLE IF EXISTS `$db`.`$stg`");
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		settle_and_check($s, 'recover');
	} ],

	# --- a refresh that skips unchanged chunks (110): the steps of its own ---

	[ skip_digests => sub {
		# the target's digests of the chunks, read before the workers start,
		# fail on the server: nothing was read from the source yet
		my $s = new_skip_s('skdg', "(9, '2026-09-08 01:00:00', 'added behind dpwin')");
		my $pat = "GROUP BY __dpwin_chunk ORDER BY __dpwin_chunk";
		fault_checked(pattern => $pat, mode => 'error', code => 241, count => 1);
		my $seq = ch_log_seq();
		my ($rc, $out, $err) = run_e2($s);
		like($err, qr/ERROR:\s+\w{5}: ClickHouse error 241 /, "$s->{tag}: the refresh fails with the server's error")
		  or diag($err);
		is(psql_ok("SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND state <> 'pending'"), 0,
			"$s->{tag}: every chunk is still pending: none was compared");
		is(scalar(grep { index($_->{query}, "$s->{prefix}stg_") >= 0 || index($_->{query}, "$s->{prefix}gen") >= 0 }
				ch_log_since($seq)), 0, "$s->{tag}: no staging table or clone was made");
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		settle_and_check($s, 'failed');
	} ],

	[ skip_pgr_staging => sub {
		# PostgreSQL restarts while the one changed chunk is staged
		restart_pg_while_staging(new_skip_s('skpg', "(9, '2026-09-08 01:00:00', 'added behind dpwin')"), 1, 1,
			"the changed chunk's staging INSERT is on the server");
	} ],

	[ skip_whole_clone => sub {
		# a partitioned target is cloned whole while the workers compare
		return if $shape eq 'flat';
		my $s = new_skip_s('skcl', "(9, '2026-09-08 01:00:00', 'added behind dpwin')");
		kill_while_extracting($s, "' FROM `$db`.`$s->{t}`",
			qr/^ALTER TABLE `\Q$db\E`\.`\Q$s->{prefix}gen\E` ATTACH PARTITION .* FROM `\Q$db\E`\.`\Q$s->{t}\E`/s,
			"the whole clone's attach waits on the server");
	} ],

	[ skip_narrow => sub {
		# every chunk of the day changed: the whole clone's partition of the
		# day lies inside the staged chunks and is dropped from it (a month's
		# partition holds kept rows too, and the generation is cloned again)
		return if $shape ne 'day';
		my $s = new_skip_s('sknr', join(', ', map { "(9, '2026-09-08 $_:00:00', 'added behind dpwin')" } qw(01 07 13 19)));
		my $pat = "`$s->{prefix}gen` DROP PARTITION ID '20260908'";
		kill_while_extracting($s, $pat, qr/^ALTER TABLE `\Q$db\E`\.\Q$pat\E/,
			'the narrowing of the clone waits on the server', sub {
				is(psql_ok("SELECT string_agg(chunk_no || ':' || state, ',' ORDER BY chunk_no) FROM dpwin.chunk"
					  . " WHERE invocation_id = '$s->{inv}'"), '0:verified,1:verified,2:verified,3:verified',
					"$s->{tag}: every chunk was staged");
			});
	} ],

	# --- chunk workers (101) ---

	[ kill_worker => sub {
		# SIGKILL of a chunk worker restarts the cluster: the coordinator dies too
		my $s = new_s('kwrk');
		my $barrier = hold_source("$db.src", 'src_w');
		my $h = start_e2($s);
		my @pids = workers_held($s->{inv}, 2);
		is(scalar(@pids), 2, "$s->{tag}: both chunk workers are at the source barrier");
		crash([ $pids[0] ], $h, $s->{tag}, 'the worker of chunk 0');
		bg_finish($barrier);
		check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
		settle_and_check($s, 'expired');
	} ],

	(map {
		my $which = $_;
		[ "term_worker_$which" => sub {
			my $s = new_s("tw$which");
			my $barrier = hold_source("$db.src", 'src_w');
			my $h = start_e2($s);
			my @pids = workers_held($s->{inv}, 2);
			is(scalar(@pids), 2, "$s->{tag}: both chunk workers are at the source barrier");
			my @victims = $which eq 'one' ? ($pids[0]) : @pids;
			is(psql_ok("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest(ARRAY["
					  . join(',', @victims) . "]) pid"), scalar(@victims), "$s->{tag}: pg_terminate_backend()");
			ok(wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity WHERE pid IN (" . join(',', @victims) . ")") == 0 }, 30),
				"$s->{tag}: terminated");
			release_source($barrier);
			my ($rc, $out, $err) = bg_finish($h);
			like($err, qr/ERROR:\s+55000: chunk 0 of invocation \Q$s->{inv}\E was not staged/,
				"$s->{tag}: the caller is told which chunk was not staged") or diag($err);
			check_after_fault($s, which => 'old', state => 'failed', outcome => '');
			settle_and_check($s, 'failed');
		} ]
	} qw(one all)),

	[ worker_error => sub {
		my $s = new_s('werr');
		fault_checked(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_0_0` (", mode => 'error', code => 53, count => 1);
		my ($rc, $out, $err) = run_e2($s);
		like($err, qr/ERROR:\s+HV000: ClickHouse error 53 while inserting rows of chunk 0/,
			"$s->{tag}: the refresh fails with the worker's error") or diag($err);
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		settle_and_check($s, 'failed');
	} ],

	# --- PostgreSQL immediate restarts (102) ---

	[ pgr_extracting => sub {
		restart_pg_while_staging(new_s('pgrx'), 4, 2, 'two staging INSERTs are on the server');
	} ],

	[ pgr_verified => sub {
		my $s = new_s('pgrv');
		my $seq = ch_log_seq();
		fault_checked(pattern => staged_attach_pattern($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_running(staged_attach_re($s), 1, phase => 'holding'),
			"$s->{tag}: the attach of the staged parts waits on the server");
		restart_pg_lost($h, $s->{tag});
		is(release(staged_attach_pattern($s)), 1, "$s->{tag}: released after the restart");
		ok(wait_answered($seq, staged_attach_re($s)), "$s->{tag}: its last statement has ended");
		check_after_fault($s, which => 'old', state => 'verified', outcome => '');
		settle_and_check($s, 'recover');
	} ],

	[ pgr_intent => sub {
		my $s = new_s('pgri');
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		wait_state($s, 'publishing');
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		restart_pg_lost($h, $s->{tag});
		is(release(xpat($s)), 1, "$s->{tag}: released after the restart");
		ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: the EXCHANGE ran on ClickHouse all the same");
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
	} ],

	# --- the endpoint misbehaving (103) ---

	[ refused => sub {
		my $s = new_s('refu');
		fault_checked(mode => 'refuse', count => 1000);
		my ($rc, $out, $err) = run_e2($s);
		ch_control('POST', '/faults/clear');
		like($err, qr/ERROR:\s+08006: lost the connection to ClickHouse server /,
			"$s->{tag}: the refresh fails with a lost connection (the server closes it at once)") or diag($err);
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		settle_and_check($s, 'failed');
	} ],

	[ chr_extracting => sub {
		my $s = new_s('chrx');
		fault_checked(pattern => stg_pat($s), mode => 'hold', count => 2);
		my $h = start_e2($s);
		ok(wait_running(stg_re($s), 2, phase => 'holding'), "$s->{tag}: two staging INSERTs are held on the server");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		# The interrupted chunks are retried with backoff; the refresh fails
		# if the endpoint is not back before the retries run out (on a
		# loaded machine its restart can take that long): recorded.
		hedge_counted("chr_extracting/$mode", $out eq 'completed' ? 'completed' : 'retries_out');
		if ($out eq 'completed')
		{
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			is(psql_ok("SELECT sum(attempt) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}'"), 2,
				"$s->{tag}: the two interrupted chunks were loaded again");
			settle_and_check($s, 'recover');
		}
		else
		{
			like($err, qr/ERROR:\s+$server_gone.* while inserting rows of chunk/,
				"$s->{tag}: or the refresh fails with the retries run out") or diag($err);
			check_after_fault($s, which => 'old', state => 'failed', outcome => '');
			settle_and_check($s, 'failed');
		}
	} ],

	[ chr_verified => sub {
		# the endpoint restarts while the staged parts are attached: the
		# attach is lost before the intent, nothing is published
		my $s = new_s('chrv');
		fault_checked(pattern => staged_attach_pattern($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_running(staged_attach_re($s), 1, phase => 'holding'),
			"$s->{tag}: the attach of the staged parts waits on the server");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		# either dpwin builds again and completes, or it fails before the intent
		my $state = state_of($s->{inv});
		ok($state =~ /^(completed|failed)$/, "$s->{tag}: the refresh ended ($state)") or diag($err);
		hedge_counted("chr_verified/$mode", $state);
		if ($state eq 'completed')
		{
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			check_after_fault($s, which => 'old', state => 'failed', outcome => '');
			settle_and_check($s, 'failed');
		}
	} ],

	[ chr_publishing => sub {
		my $s = new_s('chrp');
		fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
		my $h = start_e2($s);
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE is held on the server");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		# The stop cancels the held EXCHANGE and answers it 394, as a
		# server's shutdown does (the scenario's first refresh published
		# E1 with one EXCHANGE).  dpwin does not take that for "not
		# exchanged": it reads the target's UUID, which meets the server
		# still stopping, and leaves the invocation publishing for
		# recover() -- or, the server back by then, finds the target
		# unexchanged and exchanges once more: recorded.
		is((exchanges_in_log_file($s->{t}))[1], '500', "$s->{tag}: the stop cancelled the EXCHANGE and answered it (394)");
		hedge_counted("chr_publishing/$mode", $out eq 'completed' ? 'completed'
			: $err =~ /while settling query/ ? 'unsettled' : 'left_to_recover');
		if ($out eq 'completed')
		{
			is(join(',', map { $_->{status} } exchanges(0, $s->{t})), '200', "$s->{tag}: dpwin exchanged once more");
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			like($err, qr/ERROR:\s+(?:$server_gone.*|08006: .*)(?:HINT:.*dpwin\.recover\('\Q$s->{inv}\E'\)|while settling query dpwin-\Q$s->{inv}\E-exchange-)/s,
				"$s->{tag}: the refresh fails, leaving the publication to recover()") or diag($err);
			check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
			my $seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(scalar(exchanges($seq, $s->{t})), 1, "$s->{tag}: recover exchanged once");
		}
	} ],

	[ ins_timeout => sub {
		# only the held INSERT can outlast the server's request_timeout
		my $s = new_s('inst', server => $slow);
		my $seq = ch_log_seq();
		my $stg = "$s->{prefix}stg_0_0";
		my $re = qr/^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/;
		fault_checked(pattern => "INSERT INTO `$db`.`$stg`", mode => 'hold', count => 1);
		my ($rc, $out, $err) = run_e2($s);
		is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
		if ($mode eq 'visible')
		{
			is(release($stg), 0, "$s->{tag}: the timed-out INSERT is not held any more");
		}
		else
		{
			is(release($stg), 1, "$s->{tag}: the timed-out INSERT is still held when the refresh completed");
			ok(wait_answered($seq, $re), "$s->{tag}: released, it has ended");
		}
		isnt((grep { $_->{query} =~ $re } log_entries($seq))[0]{status}, '200',
			"$s->{tag}: the timed-out INSERT did not insert");
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		settle_and_check($s, 'recover');
	} ],

	[ x_late => sub {
		my $s = new_s('xlat', server => $slow);
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
		if ($mode eq 'visible')
		{
			my ($rc, $out, $err) = run_e2($s);
			is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
			is(join(',', map { $_->{status} } exchanges($seq, $s->{t})), '500,200',
				"$s->{tag}: the timed-out EXCHANGE was killed, and the one more EXCHANGE ran");
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			my ($rc, $out, $err) = run_e2($s);
			like($err, qr/ERROR:\s+08006: .*EXCHANGE/, "$s->{tag}: the refresh fails: the EXCHANGE got no answer") or diag($err);
			is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: no second EXCHANGE while the first may still run");
			is(release(xpat($s)), 1, "$s->{tag}: the first is still held");
			ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: released, the timed-out EXCHANGE has run");
			check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
			$seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
		}
	} ],

	[ idle_exchange => sub {
		# the server closes the kept-alive connection as the EXCHANGE
		# arrives on it: the EXCHANGE is dropped unrun, its reply lost
		my $s = new_s('idlx');
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'idle_close', ms => 0, count => 1);
		my ($rc, $out, $err) = run_e2($s);
		my @x = exchanges($seq, $s->{t});
		is($x[0]{status}, 'idle-closed', "$s->{tag}: the EXCHANGE reached the server on a connection it closed");
		if ($mode eq 'visible')
		{
			# dpwin settles it (not running), finds the target unexchanged
			# and exchanges once more
			is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
			is(join(',', map { $_->{status} } @x), 'idle-closed,200', "$s->{tag}: one more EXCHANGE ran");
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			like($err, qr/ERROR:\s+08006: .*EXCHANGE.*HINT:.*dpwin\.recover\('\Q$s->{inv}\E'\)/s,
				"$s->{tag}: the refresh fails, leaving the publication to recover()") or diag($err);
			is(scalar(@x), 1, "$s->{tag}: no second EXCHANGE while the first may still run");
			check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
			$seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(join(',', map { $_->{status} } exchanges($seq, $s->{t})), '200', "$s->{tag}: recover exchanged once");
		}
	} ],

	# --- server-grade faults at the publication: the EXCHANGE committed
	# and its reply lost; statements that ignore KILL QUERY; the settling
	# question unanswered; an INSERT that completes after its client gave up

	[ x_lost => sub {
		# the EXCHANGE runs to completion, then the connection is dropped
		# without a reply
		my $s = new_s('xlst');
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'lost', count => 1);
		my ($rc, $out, $err) = run_e2($s);
		my @x = exchanges($seq, $s->{t});
		is(join(',', map { $_->{status} } @x), 'lost', "$s->{tag}: one EXCHANGE, run, its reply lost; no second one");
		x_committed_then($s, $out, $err, $seq);
	} ],

	[ x_lost_restart => sub {
		# the EXCHANGE runs to completion, then ClickHouse restarts before
		# it replies
		my $s = new_s('xlrs');
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'hold_reply', count => 1);
		my $h = start_e2($s);
		ok(wait_until(sub { grep { $_->{query} =~ exchange_re($s->{t}) } holds() }, 60),
			"$s->{tag}: the EXCHANGE ran; its reply is held");
		isnt(uuid_of($s->{t}), $s->{pre_uuid}, "$s->{tag}: the target was exchanged before the restart");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		# the scenario's first refresh published E1 with one EXCHANGE
		is(join(',', exchanges_in_log_file($s->{t})), '200,reply-dropped',
			"$s->{tag}: one EXCHANGE, its reply dropped by the restart; no second one");
		x_committed_then($s, $out, $err, $seq, 1);
	} ],

	[ x_stubborn => sub {
		# the EXCHANGE ignores KILL QUERY and outlasts request_timeout
		my $s = new_s('xstb', server => $slow);
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'stubborn', count => 1);
		my ($rc, $out, $err) = run_e2($s);
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE still runs on the server");
		only_held_timed_out($s, $seq, qr/^(EXCHANGE TABLES|KILL QUERY)/);
		stubborn_outlived($s, $err, 'exchange', exchange_re($s->{t}));
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: and no second EXCHANGE was sent");
		check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
		is(release(xpat($s)), 1, "$s->{tag}: released");
		ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: the first EXCHANGE has run, after its client gave up");
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
	} ],

	[ backup_stubborn => sub {
		# after the EXCHANGE, the RENAME that keeps the replaced table as
		# the backup ignores KILL QUERY and outlasts request_timeout
		my $s = new_s('bstb', server => $slow);
		my $seq = ch_log_seq();
		my $seq0 = $seq;
		my $pat = "RENAME TABLE `$db`.`$s->{prefix}gen` TO";
		my $re = qr/^\Q$pat\E/;
		fault_checked(pattern => $pat, mode => 'stubborn', count => 1);
		my ($rc, $out, $err) = run_e2($s);
		ok(wait_running($re, 1, phase => 'holding'), "$s->{tag}: the RENAME still runs on the server");
		only_held_timed_out($s, $seq, qr/^(RENAME TABLE|KILL QUERY)/);
		if ($mode eq 'visible')
		{
			stubborn_outlived($s, $err, 'backup', $re);
			like($err, qr/HINT:\s+The invocation is published; .*dpwin\.recover\('\Q$s->{inv}\E'\)/s,
				"$s->{tag}: the refresh fails after publishing, naming recover()") or diag($err);
			check_after_fault($s, which => 'new', state => 'published', outcome => 'published');
		}
		else
		{
			# dpwin cannot tell whether the RENAME still runs and leaves
			# the replaced table to it
			is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
			is(scalar(grep { $_->{query} =~ /^KILL QUERY/ } running()), 0, "$s->{tag}: no KILL QUERY was sent");
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		}
		is(release($pat), 1, "$s->{tag}: released");
		ok(wait_answered($seq, $re), "$s->{tag}: the RENAME has run, after its client gave up");
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
		is(scalar(exchanges($seq0, $s->{t})), 1, "$s->{tag}: one EXCHANGE in all");
	} ],

	[ ins_late => sub {
		# a staging INSERT has all its rows, ignores KILL QUERY and
		# completes after its client timed out
		my $s = new_s('insl', server => $slow);
		my $seq = ch_log_seq();
		my $stg = "$s->{prefix}stg_0_0";
		my $re = qr/^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/;
		fault_checked(pattern => "INSERT INTO `$db`.`$stg`", mode => 'stubborn', count => 1);
		my $h = start_e2($s);
		ok(wait_running($re, 1, phase => 'holding'), "$s->{tag}: the INSERT has its rows and is held on the server");
		my ($qid) = map { $_->{query_id} } grep { $_->{query} =~ $re } running();
		if ($mode eq 'visible')
		{
			# dpwin times out, then settles the INSERT: its KILL QUERY ...
			# SYNC waits on the server, as on a server, until the INSERT ends
			ok(wait_running(qr/^KILL QUERY WHERE query_id = '\Q$qid\E' SYNC/, 1, timeout => 60),
				"$s->{tag}: dpwin settles the timed-out INSERT: its KILL QUERY ... SYNC waits");
			is(release($stg), 1, "$s->{tag}: released: the INSERT completes after its client timed out");
		}
		my ($rc, $out, $err) = bg_finish($h);
		is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
		if ($mode eq 'hidden')
		{
			# dpwin cannot see it and moved on to another staging table
			is(release($stg), 1, "$s->{tag}: the timed-out INSERT is still held when the refresh completed");
		}
		ok(wait_answered($seq, $re), "$s->{tag}: the timed-out INSERT has ended");
		only_held_timed_out($s, $seq, qr/^(INSERT INTO `\Q$db\E`\.`\Q$stg\E`|KILL QUERY)/);
		is((grep { $_->{query} =~ $re } log_entries($seq))[0]{status}, '200', "$s->{tag}: and inserted its rows");
		is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
			"$s->{tag}: chunk 0 was staged again in a table of its own");
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		settle_and_check($s, 'recover');
	} ],

	[ attach_stubborn => sub {
		# the build's attach of the staged parts into the generation
		# ignores KILL QUERY and outlasts request_timeout: the refresh fails
		# before the intent, the target untouched
		my $s = new_s('astb', server => $slow);
		my $seq = ch_log_seq();
		my $seq0 = $seq;
		my $pat = staged_attach_pattern($s);
		my $re = staged_attach_re($s);
		fault_checked(pattern => $pat, mode => 'stubborn', count => 1);
		my ($rc, $out, $err) = run_e2($s);
		ok(wait_running($re, 1, phase => 'holding'), "$s->{tag}: the attach still runs on the server");
		only_held_timed_out($s, $seq, qr/^(ALTER TABLE|KILL QUERY)/);
		my ($qid) = map { $_->{query_id} } grep { $_->{query} =~ $re } running();
		if ($mode eq 'visible')
		{
			# (the failed refresh's KILL below may stop dpwin's KILL QUERY
			# ... SYNC of the attach, as a server's KILL stops a KILL)
			like($err, qr/ERROR:\s+08006: .*did not answer in time while settling query \Q$qid\E/,
				"$s->{tag}: the refresh gives up settling its attach") or diag($err);
			ok(scalar(grep { $_->{query} =~ /^KILL QUERY WHERE query_id = '\Q$qid\E' SYNC/ } log_entries($seq), running()),
				"$s->{tag}: dpwin sent KILL QUERY ... SYNC for it");
		}
		else
		{
			like($err, qr/ERROR:\s+08006: .*did not answer in time while attaching partitions to `\Q$db\E`\.`\Q$s->{prefix}gen\E`/,
				"$s->{tag}: the refresh fails: the attach got no answer") or diag($err);
			is(scalar(grep { $_->{query} =~ /^KILL QUERY WHERE query_id = / } log_entries($seq), running()), 0,
				"$s->{tag}: no KILL QUERY by query_id was sent");
		}
		# the failed refresh stops whatever of it may still run, by its
		# query_ids' and its tables' prefix: that KILL QUERY ... SYNC waits
		# on the attach, as on a server
		ok(scalar(grep { $_->{query} =~ /^KILL QUERY WHERE .*\Q$s->{prefix}\E.* SYNC/ } running()),
			"$s->{tag}: the failed refresh's KILL QUERY ... SYNC of its statements waits on the attach");
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		is(release($pat), 1, "$s->{tag}: released");
		ok(wait_logged($seq, $re), "$s->{tag}: the attach has ended, after its client gave up");
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		is(scalar(exchanges($seq0, $s->{t})), 0, "$s->{tag}: no EXCHANGE was sent");
		settle_and_check($s, 'failed');
	} ],

	[ cleanup_stubborn => sub {
		# after the EXCHANGE, the clean-up's DROP of the staging tables
		# ignores KILL QUERY and outlasts request_timeout, each time it is
		# sent: the refresh completes with a warning, recover() drops them
		my $s = new_s('cstb', server => $slow);
		my $seq = ch_log_seq();
		my $seq0 = $seq;
		my $pat = "DROP TABLE IF EXISTS `$db`.`$s->{prefix}stg_0_0`";
		my $re = qr/^\Q$pat\E/;
		fault_checked(pattern => $pat, mode => 'stubborn', count => 1000);
		my ($rc, $out, $err) = run_e2($s);
		is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
		like($err, qr/WARNING:\s+01000: staging tables of invocation \Q$s->{inv}\E were not dropped: .*did not answer in time while dropping tables.*HINT:\s+SELECT \* FROM dpwin\.recover\('\Q$s->{inv}\E'\) drops them/s,
			"$s->{tag}: with a warning naming recover()") or diag($err);
		my $held = scalar(grep { $_->{query} =~ $re } running());
		ok($held >= 1, "$s->{tag}: its DROPs still run on the server ($held)");
		is(scalar(grep { $_->{query} =~ $re } log_entries($seq)), 0, "$s->{tag}: none of them was answered");
		is(scalar(grep { $_->{query} =~ /^KILL QUERY/ } log_entries($seq), running()), 0, "$s->{tag}: no KILL QUERY was sent");
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		is(scalar(exchanges($seq0, $s->{t})), 1, "$s->{tag}: one EXCHANGE");
		# the DROPs that recover() sends are not held
		check_fired('cleanup_stubborn', $seq);
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
		is(release($pat), $held, "$s->{tag}: the held DROPs are released after recover()");
		ok(wait_logged($seq0, $re, answered => 1, n => $held), "$s->{tag}: they have ended, after their client gave up");
		is(join(',', grep { $_ ne '200' } map { $_->{status} } grep { $_->{query} =~ $re } log_entries($seq0)), '',
			"$s->{tag}: and found nothing left to drop");
		is_deeply(leftovers(), [], "$s->{tag}: no staging or generation table is left");
	} ],

	[ x_stubborn_restart => sub {
		# ClickHouse restarts while the EXCHANGE, which ignores KILL QUERY,
		# runs: the server lets it finish and answers it before it stops
		my $s = new_s('xsrs');
		fault_checked(pattern => xpat($s), mode => 'stubborn', count => 1);
		my $h = start_e2($s);
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE runs on the server");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		# the scenario's first refresh published E1 with one EXCHANGE
		is(join(',', exchanges_in_log_file($s->{t})), '200,200',
			"$s->{tag}: the EXCHANGE ran to its end in the restart and was answered; no second one");
		after_restart_published($s, $out, $err);
	} ],

	[ ins_stubborn_restart => sub {
		# ClickHouse restarts while a staging INSERT, its rows in, runs and
		# ignores cancellation: the server lets it commit and answers it
		my $s = new_s('isrs');
		my $stg = "$s->{prefix}stg_0_0";
		my $re = qr/^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/;
		fault_checked(pattern => "INSERT INTO `$db`.`$stg`", mode => 'stubborn', count => 1);
		my $h = start_e2($s);
		ok(wait_running($re, 1, phase => 'holding'), "$s->{tag}: the INSERT has its rows and runs on the server");
		# the other chunks staged first, so that the restart meets this one only
		ok(wait_until(sub { chunks_in_state($s, 'verified') >= 3 }, 60),
			"$s->{tag}: the other chunks are staged");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		my @st = statuses_in_log_file($re);
		is($st[0], '200', "$s->{tag}: the INSERT committed in the restart and was answered");
		# the chunk's verification, right after, meets the server down
		# (or, if it is back by then, the refresh completes): recorded
		hedge_counted("ins_stubborn_restart/$mode", $out eq 'completed' ? 'completed' : 'server_down');
		if ($out eq 'completed')
		{
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			like($err, qr/ERROR:\s+$server_gone/,
				"$s->{tag}: or the refresh fails, the server down") or diag($err);
			check_after_fault($s, which => 'old', state => 'failed', outcome => '');
			settle_and_check($s, 'failed');
		}
	} ],

	[ x_unanswered => sub {
		# the EXCHANGE outlasts request_timeout and ignores KILL QUERY; the
		# server answers none of dpwin's system.processes lookups that
		# would settle it.  Hidden query ids: dpwin asks none.
		return if $mode eq 'hidden';
		my $s = new_s('xuna', server => $slow);
		my $seq = ch_log_seq();
		fault_checked(pattern => xpat($s), mode => 'stubborn', count => 1);
		fault_checked(pattern => "FROM system.processes WHERE query_id = 'dpwin-$s->{inv}-exchange-", mode => 'lost',
			count => 1000);
		my ($rc, $out, $err) = run_e2($s);
		like($err, qr/ERROR:\s+08006: lost the connection to ClickHouse server .*while settling query dpwin-\Q$s->{inv}\E-exchange-/,
			"$s->{tag}: the refresh fails: the settling question got no answer") or diag($err);
		my @l = grep { $_->{query} =~ /FROM system\.processes WHERE query_id = 'dpwin-\Q$s->{inv}\E-exchange-/ } log_entries($seq);
		ok(@l && !grep({ $_->{status} ne 'lost' } @l), "$s->{tag}: every lookup reached the server and got no answer (" . scalar(@l) . ')');
		is(scalar(grep { $_->{query} =~ /^KILL QUERY/ } log_entries($seq)), 0, "$s->{tag}: no KILL QUERY was sent");
		ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE still runs on the server");
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: and no second EXCHANGE was sent");
		check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
		check_fired('x_unanswered', $seq);
		is(release(xpat($s)), 1, "$s->{tag}: released");
		ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: the EXCHANGE has run");
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: recover sent no EXCHANGE");
	} ],

	# --- cancels and terminates of the caller (104) ---

	(map {
		my $how = $_;
		my $h3 = substr($how, 0, 3);
		(
			[ "${how}_extracting" => sub {
				my $s = new_s("${h3}x");
				fault_checked(pattern => stg_pat($s), mode => 'hold', count => 4);
				my ($h, $pid) = matrix_caller($s);
				ok(wait_running(stg_re($s), 2, phase => 'holding'), "$s->{tag}: two staging INSERTs are on the server");
				interrupt_caller($s, $how, $h, $pid);
				wait_final($s);
				none_held($s);
				check_after_fault($s, which => 'old', state => 'failed', outcome => '');
				settle_and_check($s, 'failed');
			} ],
			[ "${how}_building" => sub {
				my $s = new_s("${h3}b");
				fault_checked(pattern => staged_attach_pattern($s), mode => 'hold', count => 1);
				my ($h, $pid) = matrix_caller($s);
				ok(wait_running(staged_attach_re($s), 1, phase => 'holding'),
					"$s->{tag}: the attach of the staged parts is on the server");
				interrupt_caller($s, $how, $h, $pid);
				wait_final($s);
				none_held($s);
				check_after_fault($s, which => 'old', state => 'failed', outcome => '');
				settle_and_check($s, 'failed');
			} ],
			[ "${how}_publishing" => sub {
				my $s = new_s("${h3}p");
				fault_checked(pattern => xpat($s), mode => 'hold', count => 1);
				my ($h, $pid) = matrix_caller($s);
				wait_state($s, 'publishing');
				ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE is on the server");
				interrupt_caller($s, $how, $h, $pid);
				is(release(xpat($s)), 1, "$s->{tag}: the EXCHANGE still waits after the interruption, and is released");
				wait_final($s);
				check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
				settle_and_check($s, 'recover');
			} ],
		)
	} qw(cancel terminate)),

	# --- least privilege (105) ---

	[ lp_denied => sub {
		# the least-privileged account builds the partitioned clone; the
		# server then denies the attach of the staged parts
		my $s = new_s('lpd', server => $lp);
		my $seq = ch_log_seq();
		fault_checked(pattern => staged_attach_pattern($s), mode => 'error', code => 497, count => 1);
		my ($rc, $out, $err) = run_e2($s);
		like($err, qr/ERROR:\s+42501: /, "$s->{tag}: the refresh fails with the denial") or diag($err);
		my %users = map { $_->{user} => 1 } grep { index($_->{query}, $db) >= 0 } log_entries($seq);
		is(join(',', sort keys %users), $ENV{DPWIN_CH_REFRESH_USER}, "$s->{tag}: every statement as the least-privileged account");
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		settle_and_check($s, 'failed');
	} ],

	# --- idle connections closed by the server (106) ---

	[ idle_race => sub {
		my $s = new_s('idle');
		my $seq = ch_log_seq();
		my $pat = staged_attach_pattern($s);
		fault_checked(pattern => $pat, mode => 'idle_close', ms => 0, count => 1);
		my ($rc, $out, $err) = run_e2($s);
		like($err, qr/ERROR:\s+08006: lost the connection to ClickHouse server/, "$s->{tag}: the refresh fails with a lost reply")
		  or diag($err);
		my @att = grep { index($_->{query}, $pat) >= 0 } log_entries($seq);
		is($att[0]{status}, 'idle-closed', "$s->{tag}: the attach reached the server on a connection it closed");
		is(scalar(grep { $_->{query_id} eq $att[0]{query_id} } log_entries($seq)), 1,
			"$s->{tag}: it was not sent again under its query_id");
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		settle_and_check($s, 'failed');
	} ],
);

sub setup_matrix
{
	($db) = @_;
	crash_setup($db);
	$evkey = 200_000 + $$ % 100_000;
	held_evidence_function($db, $evkey);
	# a request_timeout that no statement but a held one outlasts
	$slow = "${db}_slow";
	psql_ok("CREATE SERVER $slow FOREIGN DATA WRAPPER dpwin_clickhouse"
		  . " OPTIONS (url '$ENV{DPWIN_CH_URL}', request_timeout '8s');
		CREATE USER MAPPING FOR CURRENT_USER SERVER $slow
		  OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');");
	$lp = "${db}_lp";
	psql_ok("CREATE SERVER $lp FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$ENV{DPWIN_CH_URL}');
		CREATE USER MAPPING FOR CURRENT_USER SERVER $lp
		  OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');");
}

# Run the matrix on target shape $sh (day, month, flat) in ClickHouse
# database and PostgreSQL schema $database.
#   DPWIN_FAULT_MATRIX       full (every case in both query-id modes), slice
#                            (every case in one mode, alternating) or rest
#                            (the cases and modes the slice leaves out)
#   DPWIN_FAULT_MATRIX_PART  k/n: of those, every n-th from the k-th (0 <=
#                            k < n), so that n runs share them out
#   DPWIN_FAULT_MATRIX_ONLY  a regexp of case names, for debugging
sub run_matrix
{
	my ($sh, $database) = @_;
	$shape = $sh;
	my $size = $ENV{DPWIN_FAULT_MATRIX} // 'full';
	die "DPWIN_FAULT_MATRIX must be full, slice or rest\n" unless $size =~ /^(full|slice|rest)$/;
	my ($part, $parts) = (0, 1);
	if (defined $ENV{DPWIN_FAULT_MATRIX_PART} && $ENV{DPWIN_FAULT_MATRIX_PART} ne '')
	{
		($part, $parts) = $ENV{DPWIN_FAULT_MATRIX_PART} =~ m{^(\d+)/(\d+)$}
		  or die "DPWIN_FAULT_MATRIX_PART must be k/n\n";
		die "DPWIN_FAULT_MATRIX_PART: k must be below n\n" unless $part < $parts;
	}
	my $only = $ENV{DPWIN_FAULT_MATRIX_ONLY};
	my $shape_no = { day => 0, month => 1, flat => 2 }->{$sh};
	# Shared out, each shape starts its count one further on: with an odd
	# number of cases each run takes two residues of the case index (one
	# per query-id mode), so over the three shapes every run takes every
	# case, each on some shape -- the crash classes of 100-110 all run on
	# every major of a side-by-side CI.
	my $chosen = $shape_no;
	die "the fault matrix needs an odd number of cases to share them out so\n" unless @CASES % 2;
	my $t0 = time;
	setup_matrix($database);
	for my $md ('visible', 'hidden')
	{
		($mode, $m) = ($md, substr($md, 0, 1));
		set_query_ids($mode);
		note("--- $shape, query_ids $mode ---");
		my $i = 0;
		for my $c (@CASES)
		{
			my ($name, $code) = @$c;
			my $in_slice = ($i++ + $shape_no) % 2 == ($mode eq 'visible' ? 0 : 1);
			next if $size eq 'slice' && !$in_slice;
			next if $size eq 'rest' && $in_slice;
			next if $chosen++ % $parts != $part;
			next if defined $only && $name !~ /$only/;
			note("case $name ($shape, $mode)");
			my $seq = ch_log_seq();
			my $before = $count{"$shape $mode"} // 0;
			$code->();
			check_fired($name, $seq);
			$kinds{$name} += ($count{"$shape $mode"} // 0) - $before;
		}
	}
	set_query_ids('visible');
	crash_teardown();
	psql_ok("DROP SERVER $slow CASCADE; DROP SERVER $lp CASCADE");
	my $n = 0;
	$n += $_ for values %count;
	diag(sprintf("fault matrix (%s%s) on %s: %s; %d faulted refreshes in %d s", $size,
			$parts > 1 ? ", part $part/$parts" : '', $shape,
			join(', ', map { "$_ $count{$_}" } sort keys %count), $n, time - $t0));
	diag("fault matrix on $shape, by kind: " . join(', ', map { "$_ $kinds{$_}" } sort keys %kinds));
	diag("fault matrix on $shape, hedged branches: " . join(', ', map { "$_ $hedged{$_}" } sort keys %hedged))
	  if %hedged;
	return $n;
}

1;
