package DpwinCrash;

# The crash matrix's common part (100_crash_coordinator.t to
# 104_cancel.t), and the kill/restart/wait helpers that 062_recovery.t
# shares with it.
#
# Every scenario has its own target and route.  The route publishes window
# E1 first (so the route has a state and the target a published generation),
# then window E2 runs into the fault.  After the fault:
#   (a) the target's full row multiset is exactly the old generation or
#       exactly the new one;
#   (b) the journal (invocation state, publication outcome) says which;
#   (c) recover() -- or, where the snapshot expired before publication, a new
#       invocation -- completes and the target is the new generation;
#   (d) no staging or generation table is left in the database;
#   (e) dpwin.route_state never moved backwards.
#
# A test file calls crash_setup($db) first (its ClickHouse database and
# PostgreSQL schema, both named $db, with the source table) and
# crash_teardown() last.

use strict;
use warnings;
use Exporter 'import';
use IPC::Run qw(run timeout);
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes ch_rows uuid_of micros after_refresh
  invocation_prefix bg_psql bg_finish waits_for_http hold_session release_session
  refresh_sql pg_up coordinator_pid wait_logged);

# refresh_sql, pg_up and coordinator_pid are DpwinFixture's, exported here
# too for the crash tests.
our @EXPORT = qw($E1 $E2 crash_setup crash_teardown scenario check_after_fault settle_and_check
  refresh_sql journal state_of chunks_in_state route_state check_route_state leftovers
  hold_locks release_locks pg_up coordinator_pid waits_on_lock sandbox_cmd crash wait_answered
  crash_in_request start_caller interrupt_caller wait_final held_evidence_function);

# The two windows of every scenario: E1 published first, E2 faulted.
our $E1 = '2026-09-08 00:00:00+00';
our $E2 = '2026-09-09 00:00:00+00';

my $db;          # the test file's ClickHouse database and PostgreSQL schema
my @routes;      # the routes scenario() created, dropped by crash_teardown()
my %rs_high;     # route -> highest route_state seen, in microseconds

# A fresh database and schema named $db, no faults, and the source table:
# rows every 23 minutes from 09-07 on (through both windows), duplicates, a
# NULL window and a row at E2 (never extracted); its index src_w is the one
# DpwinFixture::hold_source() locks.
# An evidence function in schema $db that waits on the transaction-level
# advisory lock $key before it logs into $db.ev_log: a session holding that
# lock (hold_locks) keeps a coordinator inside its evidence step.  Returns
# the function's signature, for a route's evidence option.
sub held_evidence_function
{
	my ($db, $key) = @_;
	psql_ok("CREATE TABLE $db.ev_log (invocation_id uuid NOT NULL, metrics jsonb NOT NULL);
		CREATE FUNCTION $db.record_evidence(inv uuid, metrics jsonb) RETURNS void
			LANGUAGE plpgsql AS \$\$
			BEGIN
				PERFORM pg_advisory_xact_lock($key);
				INSERT INTO $db.ev_log VALUES (inv, metrics);
			END
			\$\$;");
	return "$db.record_evidence(uuid,jsonb)";
}

sub crash_setup
{
	($db) = @_;
	ch_control('POST', '/faults/clear');
	fresh_fixture($db, $db);
	psql_ok("CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz, v text);
		INSERT INTO $db.src
			SELECT g, timestamptz '2026-09-07 00:00:00+00' + g * interval '23 minutes 0.5 seconds', 'new ' || (g % 11)
			FROM generate_series(0, 160) g;
		INSERT INTO $db.src VALUES (500, '2026-09-08 12:00:00+00', 'dup'), (500, '2026-09-08 12:00:00+00', 'dup'),
			(501, NULL, 'never extracted'), (502, '2026-09-09 00:00:00+00', 'never extracted');
		CREATE INDEX src_w ON $db.src (w);");
}

sub crash_teardown
{
	ch_control('POST', '/faults/clear');
	drop_routes(@routes);
	drop_fixture();
}

# Staging, generation and probe tables of any invocation, left in the database.
sub leftovers
{
	return [ sort grep { $_ ne '' } split /\n/,
		  ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
			  . " AND match(name, '^_dpwin_(probe_|[0-9]+_[0-9a-f]{12}_(stg_|gen\$|probe_))') FORMAT TSVRaw") ];
}

# state|outcome|generation_uuid of an invocation ('' for NULL)
sub journal
{
	my ($inv) = @_;
	return split /\|/, psql_ok("SELECT i.state, coalesce(p.outcome, ''), coalesce(p.generation_uuid::text, '')"
		  . " FROM dpwin.invocation i LEFT JOIN dpwin.publication p USING (invocation_id)"
		  . " WHERE i.invocation_id = '$inv'"), -1;
}

sub state_of { return (journal($_[0]))[0] // ''; }

# Start the E2 refresh of scenario $s under an application name of its own;
# returns the bg_psql handle and the caller's backend pid, once the caller
# is active.
sub start_caller
{
	my ($s) = @_;
	my $app = unique_name('caller');
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}), $app);
	my $pid;
	wait_until(sub {
			$pid = psql_ok("SELECT pid FROM pg_stat_activity WHERE application_name = '$app' AND state = 'active'");
			$pid ne '';
		}, 30);
	return ($h, $pid);
}

# Cancel or terminate ($how) the caller started by start_caller: the
# caller gets exactly the cancel or the termination.
sub interrupt_caller
{
	my ($s, $how, $h, $pid) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $f = $how eq 'cancel' ? 'pg_cancel_backend' : 'pg_terminate_backend';
	is(psql_ok("SELECT $f($pid)"), 't', "$s->{tag}: $f(caller)");
	my ($rc, $out, $err) = bg_finish($h);
	like($err, $how eq 'cancel' ? qr/ERROR:\s+57014: canceling statement due to user request/
		  : qr/FATAL:\s+57P01: terminating connection due to administrator command/,
		"$s->{tag}: the caller got its " . ($how eq 'cancel' ? 'cancel' : 'termination')) or diag($err);
}

# The interrupted caller's coordinator ends on its own: a final state and
# no progress row left.
sub wait_final
{
	my ($s) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(wait_until(sub { state_of($s->{inv}) =~ /^(completed|failed)$/
				  && psql_ok("SELECT count(*) FROM dpwin.progress WHERE invocation_id = '$s->{inv}'") == 0 }, 60),
		"$s->{tag}: the coordinator has ended") or diag(state_of($s->{inv}));
}

# How many chunks of the scenario's invocation are in the journal in $state.
sub chunks_in_state
{
	my ($s, $state) = @_;
	return psql_ok("SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND state = '$state'");
}

# The route's last_interval_end in microseconds, 0 before any.
sub route_state
{
	my ($route) = @_;
	return psql_ok("SELECT coalesce((SELECT (extract(epoch FROM s.last_interval_end) * 1000000)::bigint"
		  . " FROM dpwin.route_state s JOIN dpwin.route r USING (route_id) WHERE r.route_name = '$route'), 0)");
}

# (e): route_state is at least what was seen before.
sub check_route_state
{
	my ($s, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $now = route_state($s->{route});
	ok($now >= ($rs_high{ $s->{route} } // 0), "$label: route_state did not move backwards")
	  or diag("route_state $now < $rs_high{$s->{route}}");
	$rs_high{ $s->{route} } = $now if $now > ($rs_high{ $s->{route} } // 0);
}

# A target with rows before, inside both windows, after, NULL windows and
# duplicates; a route to it with four 6-hour chunks and two workers; window
# E1 published.  Returns the scenario: route, t, rid, inv (the id the E2
# refresh will use), old (the target now), new (after E2), pre_uuid, prefix
# (of the E2 invocation's tables).  Options: server (foreign server),
# evidence (evidence function), engine (the target's ENGINE clause after
# MergeTree; default ORDER BY id), skip (the route skips unchanged chunks).
sub scenario
{
	my ($tag, %opt) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $route = unique_name("${db}_$tag");
	my $t = "tgt_$tag";
	my $engine = $opt{engine} // 'ORDER BY id';
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
		  . " ENGINE = MergeTree $engine");
	ch_ok("INSERT INTO `$db`.`$t` VALUES (1, '2026-09-01 00:00:00', 'before'), (1, '2026-09-01 00:00:00', 'before'),"
		  . " (2, '2026-09-07 10:00:00', 'old in E1'), (3, '2026-09-08 10:00:00', 'old in E2'),"
		  . " (3, '2026-09-08 10:00:00', 'old in E2'), (5, '2026-09-20 00:00:00', 'after'),"
		  . " (4, NULL, 'null'), (4, NULL, 'null')");
	my $initial = ch_rows($t);
	my $server = $opt{server} // 'sandbox_ch';
	my $ev = $opt{evidence} ? ", evidence_function => '$opt{evidence}'" : '';
	$ev .= ', skip_unchanged => true' if $opt{skip};
	psql_ok("SELECT dpwin.create_route('$route', '$db.src'::regclass, 'w', '$server', '$db', '$t',"
		  . " interval '1 day', interval '6 hours', parallelism => 2$ev)");
	push @routes, $route;
	my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$route'");
	is(psql_ok(refresh_sql($route, $E1)), 'completed', "$tag: window E1 published first");
	my %s = (route => $route, t => $t, rid => $rid, tag => $tag);
	$s{old} = ch_rows($t);
	is_deeply($s{old}, after_refresh($initial, $E1), "$tag: (E1 is the old generation)");
	$s{new} = after_refresh($s{old}, $E2);
	$s{pre_uuid} = uuid_of($t);
	$s{inv} = psql_ok('SELECT gen_random_uuid()');
	$s{prefix} = invocation_prefix($rid, $s{inv});
	check_route_state(\%s, "$tag: before the fault");
	return \%s;
}

# (a) and (b) right after the fault: the target is the old or the new
# generation -- the one the scenario expects -- and the journal says so:
# $x{which} old|new, $x{state}, $x{outcome} ('' for none).
sub check_after_fault
{
	my ($s, %x) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $l = "$s->{tag}";
	my $rows = ch_rows($s->{t});
	my $which = eq_array($rows, $s->{old}) ? 'old' : eq_array($rows, $s->{new}) ? 'new' : 'a mix';
	is($which, $x{which}, "$l: (a) the target is exactly the $x{which} generation")
	  or diag(explain $rows);
	my ($state, $outcome, $gen_uuid) = journal($s->{inv});
	is($state, $x{state}, "$l: (b) the journal says $x{state}");
	is($outcome, $x{outcome}, "$l: (b) publication outcome " . ($x{outcome} || 'none'));
	if ($which eq 'new')
	{
		is(uuid_of($s->{t}), $gen_uuid, "$l: (b) the target's UUID is the generation of the intent");
	}
	else
	{
		is(uuid_of($s->{t}), $s->{pre_uuid}, "$l: (b) the target is the table it was");
		unlike($state, qr/^(published|evidenced|completed)$/, "$l: (b) and the journal does not claim publication");
	}
	check_route_state($s, "$l: after the fault");
}

# (c), (d), (e): settle the invocation as $how says and check the end state.
#   recover: dpwin.recover() completes it;
#   expired: recover() says the snapshot expired, a new invocation completes;
#   expired_new: a new invocation, without recover(), expires it and completes;
#   failed:  it failed (recover() refuses), a new invocation completes;
#   abandon: it failed with its tables left; abandon() drops them, a new
#            invocation completes.
sub settle_and_check
{
	my ($s, $how) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $l = "$s->{tag}";
	if ($how eq 'recover')
	{
		is(psql_ok("SELECT state FROM dpwin.recover('$s->{inv}')"), 'completed', "$l: (c) recover completes");
	}
	else
	{
		if ($how eq 'expired_new')
		{
			# no recover(): the new invocation finds the orphan and expires it
		}
		elsif ($how eq 'expired')
		{
			like(psql_err("SELECT * FROM dpwin.recover('$s->{inv}')"),
				qr/^55000: invocation \Q$s->{inv}\E cannot be recovered: its snapshot expired before publication/,
				"$l: (c) recover: the snapshot expired");
			is(state_of($s->{inv}), 'snapshot_expired', "$l: (c) journaled snapshot_expired");
		}
		else
		{
			is(state_of($s->{inv}), 'failed', "$l: (c) failed");
			like(psql_err("SELECT * FROM dpwin.recover('$s->{inv}')"), qr/^55000: .*failed and has nothing to recover/,
				"$l: (c) recover: nothing to recover");
			if ($how eq 'abandon')
			{
				ok(scalar(@{ leftovers() }) > 0, "$l: (d) its tables were left behind");
				is(psql_ok("SELECT state FROM dpwin.abandon('$s->{inv}')"), 'abandoned', "$l: (d) abandon()");
			}
		}
		is_deeply(leftovers(), [], "$l: (d) nothing of it is left before the new invocation")
		  unless $how eq 'expired_new';
		is(psql_ok(refresh_sql($s->{route}, $E2)), 'completed', "$l: (c) a new invocation completes");
		is(state_of($s->{inv}), 'snapshot_expired', "$l: (c) which expired the old one")
		  if $how eq 'expired_new';
	}
	is_deeply(ch_rows($s->{t}), $s->{new}, "$l: (c) the target is the new generation");
	# the newest publication: route_state keeps the first invocation that
	# published E2 where E2 was published before the fault (skip scenarios)
	my $published = $how eq 'recover' ? $s->{inv}
	  : psql_ok("SELECT p.invocation_id FROM dpwin.publication p JOIN dpwin.invocation i USING (invocation_id)"
		  . " JOIN dpwin.route r USING (route_id) WHERE r.route_name = '$s->{route}' AND p.outcome = 'published'"
		  . " ORDER BY p.observed_at DESC LIMIT 1");
	is(psql_ok("SELECT p.generation_uuid::text FROM dpwin.publication p WHERE invocation_id = '$published'"),
		uuid_of($s->{t}), "$l: (c) and it is the generation its invocation published");
	is_deeply(leftovers(), [], "$l: (d) no staging or generation table is left");
	is(route_state($s->{route}), micros($E2), "$l: (e) route_state is E2");
	check_route_state($s, "$l: at the end");
}

# ---- locks, processes, crashes ----------------------------------------------

# Hold row locks or an advisory lock in a session of its own until it is
# killed or cancelled: $sql runs in a transaction that then sleeps
# (DpwinFixture::hold_session).
sub hold_locks { return hold_session(@_); }

sub release_locks { release_session(@_); }

# Is process $pid waiting for a lock?
sub waits_on_lock
{
	my ($pid) = @_;
	return psql_ok("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND wait_event_type = 'Lock'") == 1;
}

# test/sandbox.sh $what (restart-pg, restart-ch) for the sandbox this test
# runs against.
sub sandbox_cmd
{
	my ($what) = @_;
	local $ENV{DPWIN_SANDBOX_DIR} = $ENV{DPWIN_SANDBOX};
	local $ENV{DPWIN_PGPORT} = $ENV{PGPORT};
	local $ENV{DPWIN_CH_PORT} = ($ENV{DPWIN_CH_URL} =~ /:(\d+)\/?$/)[0];
	local $ENV{DPWIN_CH_CONTROL_PORT} = ($ENV{DPWIN_CH_CONTROL_URL} =~ /:(\d+)\/?$/)[0];
	my $out = '';
	run([ repo_root() . '/test/sandbox.sh', $what ], '>', \$out, '2>&1', timeout(120))
	  or die "test/sandbox.sh $what failed: $out";
}

# SIGKILL @$pids (dpwin processes of the invocation running in the
# bg_psql session $h): the postmaster restarts the whole cluster; wait until
# it accepts connections.  $what names the victims in the assertion (the
# pids by default).
sub crash
{
	my ($pids, $h, $label, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is(kill('KILL', @$pids), scalar(@$pids), "$label: SIGKILL " . ($what // join(',', @$pids)));
	my ($rc, $out, $err) = bg_finish($h);
	like($err, qr/server closed the connection|terminating connection|connection to server was lost/,
		"$label: the caller lost its connection in the crash restart") or diag($err);
	# restart_after_crash may be off: then restart the sandbox's PostgreSQL
	sandbox_cmd('restart-pg') unless wait_until(\&pg_up, 30);
	ok(wait_until(\&pg_up, 60), "$label: PostgreSQL is back");
}

# Wait until the query log shows a statement matching $re that ended with
# an HTTP answer (DpwinEndpoint::wait_logged).
sub wait_answered
{
	my ($seq, $re, $timeout) = @_;
	return wait_logged($seq, $re, answered => 1, timeout => $timeout // 30);
}

# SIGKILL the coordinator $pid of invocation $inv, running in the bg_psql
# session $h, while it waits for the answer to a statement that the
# endpoint holds (a hold fault): once the query log shows a statement
# matching $o{after} answered since $o{seq} (if given), and the coordinator
# is blocked in poll(2) (DpwinFixture::waits_for_http) at two looks with a
# read of the query log between them that shows no new answer to the
# invocation's statements -- so it is not a quick statement about to be
# answered.  The test releases the hold after the crash.
sub crash_in_request
{
	my ($pid, $inv, $h, $label, %o) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $seq = $o{seq} // ch_log_seq();
	my $answered = sub {
		scalar(grep { index($_->{query_id}, "dpwin-$inv-") == 0 && $_->{status} =~ /^\d+$/ } ch_log_since($seq));
	};
	my $held = wait_until(sub {
			return 0 if $o{after} && !grep { $_->{query} =~ $o{after} && $_->{status} =~ /^\d+$/ } ch_log_since($seq);
			return 0 unless waits_for_http($pid);
			my $n = $answered->();
			return waits_for_http($pid) && $answered->() == $n;
		}, 30);
	ok($held, "$label: the coordinator waits for a held-back answer");
	crash([$pid], $h, $label, 'the coordinator');
}

1;
