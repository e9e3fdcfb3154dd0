# The crash matrix, part 4: the ClickHouse endpoint misbehaving.
#   refused       every connection refused when the refresh starts;
#   restart_xtr   the endpoint restarts while staging INSERTs run (data
#                 persists): the interrupted chunks are fenced and retried;
#   restart_pub   the endpoint restarts while the EXCHANGE waits on it: the
#                 EXCHANGE never runs, the invocation stays publishing;
#   ins_timeout   a staging INSERT outlives the server's request_timeout: the
#                 attempt is fenced and the chunk retried into a new table;
#   create_timeout  the same for the CREATE of a staging table, which runs
#                 after the refresh completed: recover() drops its table;
#   x_late        the EXCHANGE outlives request_timeout and runs later: dpwin
#                 must not exchange again while it may still run (the
#                 endpoint cannot show a client's query_id in
#                 system.processes, so settling cannot see it); the
#                 invocation stays publishing, and recover() settles it once
#                 the statement has ended;
#   x_never       the same, but the timed-out EXCHANGE never runs: recover()
#                 exchanges once;
#   x_rec_late    recover()'s own EXCHANGE times out and runs later: the same
#                 rule, a second recover() finishes it.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use IPC::Run qw(start finish run timeout);
use Time::HiRes qw(usleep);

my $db = "t103_$$";
my @routes;

# --- the crash matrix's common checks (the same block in 100-104) ----------
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

my $E1 = '2026-09-08 00:00:00+00';
my $E2 = '2026-09-09 00:00:00+00';
my %rs_high;    # route -> highest route_state seen, in microseconds

sub url_encode
{
	my ($s) = @_;
	$s =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

sub fault
{
	my (%f) = @_;
	my $r = ch_control('POST', '/fault?' . join('&', map { "$_=" . url_encode($f{$_}) } sort keys %f));
	die "fault not registered: $r" unless $r =~ /^Ok/;
}

sub micros
{
	my ($ts) = @_;
	return psql_ok("SELECT (extract(epoch FROM timestamptz '$ts') * 1000000)::bigint");
}

sub ch_rows
{
	my ($t) = @_;
	my $out = ch_ok("SELECT concat(toString(id), '|',"
		  . " ifNull(toString(toUnixTimestamp64Micro(w)), 'NULL'), '|', ifNull(v, 'NULL'))"
		  . " FROM `$db`.`$t` FORMAT TSVRaw");
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

# The source rows of the window that ends at $e.
sub src_rows
{
	my ($e) = @_;
	my $out = psql_ok("SELECT id || '|' || coalesce(((extract(epoch FROM w) * 1000000)::bigint)::text, 'NULL')"
		  . " || '|' || coalesce(v, 'NULL') FROM $db.src"
		  . " WHERE w >= timestamptz '$e' - interval '1 day' AND w < '$e'");
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

# The target after refreshing the window ending at $e over $rows.
sub after_refresh
{
	my ($rows, $e) = @_;
	my ($hi, $lo) = (micros($e), micros("$e") - 86_400_000_000);
	my @kept = grep { my (undef, $m) = split /\|/; $m eq 'NULL' || $m < $lo || $m >= $hi } @$rows;
	return [ sort(@kept, @{ src_rows($e) }) ];
}

sub uuid_of
{
	my ($t) = @_;
	my $u = ch_ok("SELECT toString(uuid) FROM system.tables WHERE database = '$db' AND name = '$t'");
	chomp $u;
	return $u eq '' ? undef : $u;
}

# Staging, generation and probe tables of any invocation, left in the database.
sub leftovers
{
	return [ sort grep { $_ ne '' } split /\n/,
		  ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
			  . " AND match(name, '^_dpwin_(probe_|[0-9]+_[0-9a-f]{12}_(stg_|gen\$))') FORMAT TSVRaw") ];
}

sub refresh_sql
{
	my ($route, $e, $inv) = @_;
	return "SELECT state FROM dpwin_refresh('$route', '$e'" . ($inv ? ", '$inv'" : '') . ")";
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
	my $now = route_state($s->{route});
	ok($now >= ($rs_high{ $s->{route} } // 0), "$label: route_state did not move backwards")
	  or diag("route_state $now < $rs_high{$s->{route}}");
	$rs_high{ $s->{route} } = $now if $now > ($rs_high{ $s->{route} } // 0);
}

# A target with rows before, inside both windows, after, NULL windows and
# duplicates; a route to it with four 6-hour chunks and two workers; window
# E1 published.  Returns the scenario: route, t, rid, inv (the id the E2
# refresh will use), old (the target now), new (after E2), pre_uuid.
sub scenario
{
	my ($tag, %opt) = @_;
	my $route = unique_name("${db}_$tag");
	my $t = "tgt_$tag";
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
		  . " ENGINE = MergeTree ORDER BY id");
	ch_ok("INSERT INTO `$db`.`$t` VALUES (1, '2026-09-01 00:00:00', 'before'), (1, '2026-09-01 00:00:00', 'before'),"
		  . " (2, '2026-09-07 10:00:00', 'old in E1'), (3, '2026-09-08 10:00:00', 'old in E2'),"
		  . " (3, '2026-09-08 10:00:00', 'old in E2'), (5, '2026-09-20 00:00:00', 'after'),"
		  . " (4, NULL, 'null'), (4, NULL, 'null')");
	my $initial = ch_rows($t);
	my $server = $opt{server} // 'sandbox_ch';
	my $ev = $opt{evidence} ? ", evidence_function => '$opt{evidence}'" : '';
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
	(my $hex = $s{inv}) =~ s/-//g;
	$s{prefix} = "_dpwin_${rid}_" . substr($hex, 0, 12) . '_';
	check_route_state(\%s, "$tag: before the fault");
	return \%s;
}

# (a) and (b) right after the fault: the target is the old or the new
# generation -- the one the scenario expects -- and the journal says so:
# $x{which} old|new, $x{state}, $x{outcome} ('' for none).
sub check_after_fault
{
	my ($s, %x) = @_;
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
	my $published = $how eq 'recover' ? $s->{inv}
	  : psql_ok("SELECT invocation_id FROM dpwin.route_state s JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name = '$s->{route}'");
	is(psql_ok("SELECT p.generation_uuid::text FROM dpwin.publication p WHERE invocation_id = '$published'"),
		uuid_of($s->{t}), "$l: (c) and it is the generation its invocation published");
	is_deeply(leftovers(), [], "$l: (d) no staging or generation table is left");
	is(route_state($s->{route}), micros($E2), "$l: (e) route_state is E2");
	check_route_state($s, "$l: at the end");
}

# A background psql running $sql; PGAPPNAME $app lets it be found.
sub bg_psql
{
	my ($sql, $app) = @_;
	my %h = (out => '', err => '');
	local $ENV{PGAPPNAME} = $app // 'dpwin_crash_test';
	$h{run} = start([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', '-c', $sql ],
		'>', \$h{out}, '2>', \$h{err}, timeout(120));
	return \%h;
}

sub bg_finish
{
	my ($h) = @_;
	eval { finish($h->{run}) };
	chomp $h->{out};
	return ($? >> 8, $h->{out}, $h->{err});
}

# Hold row locks or an advisory lock in a session of its own until it is
# killed or cancelled: $sql runs in a transaction that then sleeps.
sub hold_locks
{
	my ($sql) = @_;
	my $app = unique_name('locker');
	my $h = bg_psql("BEGIN; $sql; SELECT pg_sleep(100); COMMIT;", $app);
	wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity WHERE application_name = '$app'"
			  . " AND wait_event = 'PgSleep'") == 1 }, 30)
	  or die "the lock holder did not get its locks: $h->{err}";
	$h->{app} = $app;
	return $h;
}

sub release_locks
{
	my ($h) = @_;
	psql_ok("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$h->{app}'");
	bg_finish($h);
}

sub pg_up
{
	my ($rc) = psql('SELECT 1', timeout => 5);
	return $rc == 0;
}

# The invocation's coordinator: it holds the target's lease.
sub coordinator_pid
{
	my ($inv) = @_;
	return psql_ok("SELECT holder_pid FROM dpwin.lease WHERE holder_invocation = '$inv'");
}

# Is process $pid waiting for a lock?
sub waits_on_lock
{
	my ($pid) = @_;
	return psql_ok("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND wait_event_type = 'Lock'") == 1;
}

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

# SIGKILL @pids (dpwin processes of the invocation running in $h): the
# postmaster restarts the whole cluster; wait until it accepts connections.
sub crash
{
	my ($pids, $h, $label) = @_;
	is(kill('KILL', @$pids), scalar(@$pids), "$label: SIGKILL " . join(',', @$pids));
	my ($rc, $out, $err) = bg_finish($h);
	like($err, qr/server closed the connection|terminating connection|connection to server was lost/,
		"$label: the caller lost its connection in the crash restart") or diag($err);
	# restart_after_crash may be off: then restart the sandbox's PostgreSQL
	sandbox_cmd('restart-pg') unless wait_until(\&pg_up, 30);
	ok(wait_until(\&pg_up, 60), "$label: PostgreSQL is back");
}

# Wait until the query log shows an answered statement matching $re.
sub wait_answered
{
	my ($seq, $re, $timeout) = @_;
	return wait_until(sub { grep { $_->{query} =~ $re && $_->{status} ne '' } ch_log_since($seq) }, $timeout // 30);
}

sub setup
{
	ch_control('POST', '/faults/clear');
	ch_ok("DROP DATABASE IF EXISTS `$db`");
	ch_ok("CREATE DATABASE `$db` ENGINE = Atomic");
	psql_ok("DROP SCHEMA IF EXISTS $db CASCADE;
		CREATE SCHEMA $db;
		CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz, v text);
		INSERT INTO $db.src
			SELECT g, timestamptz '2026-09-07 00:00:00+00' + g * interval '23 minutes 0.5 seconds', 'new ' || (g % 11)
			FROM generate_series(0, 160) g;
		INSERT INTO $db.src VALUES (500, '2026-09-08 12:00:00+00', 'dup'), (500, '2026-09-08 12:00:00+00', 'dup'),
			(501, NULL, 'never extracted'), (502, '2026-09-09 00:00:00+00', 'never extracted');");
}

sub teardown
{
	ch_control('POST', '/faults/clear');
	psql_ok("SELECT dpwin.drop_route(r) FROM unnest(ARRAY['" . join("','", @routes) . "']::text[]) r;
		DROP SCHEMA $db CASCADE;");
	ch_ok("DROP DATABASE `$db`");
}

# --- end of the common block ------------------------------------------------

setup();

# A foreign server for the same endpoint with a short request timeout.
my $slow = "${db}_slow";
psql_ok("CREATE SERVER $slow FOREIGN DATA WRAPPER dpwin_clickhouse"
	  . " OPTIONS (url '$ENV{DPWIN_CH_URL}', request_timeout '1500ms');
	CREATE USER MAPPING FOR CURRENT_USER SERVER $slow
	  OPTIONS (user '$ENV{DPWIN_CH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');");

sub exchange_re
{
	my ($s) = @_;
	return qr/^EXCHANGE TABLES `\Q$db\E`\.`\Q$s->{t}\E` AND/;
}

sub exchange_fault
{
	my ($s, $ms) = @_;
	fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'delay', ms => $ms, count => 1);
}

# --- connection refused at start ---------------------------------------------------

{
	my $s = scenario('refused');
	fault(mode => 'refuse', count => 1000);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	ch_control('POST', '/faults/clear');
	like($err, qr/^08\w\w\w: /, 'refused: the refresh fails with a connection error') or diag($err);
	check_after_fault($s, which => 'old', state => 'failed', outcome => '');
	settle_and_check($s, 'failed');
}

# --- the endpoint restarts during extraction ------------------------------------------

{
	my $s = scenario('restart_xtr');
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'delay', ms => 3000, count => 2);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { psql_ok("SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND state = 'running'") == 2 }, 30),
		'restart_xtr: two chunks are being loaded');
	usleep(300_000);
	sandbox_cmd('restart-ch');
	my ($rc, $out, $err) = bg_finish($h);
	is($out, 'completed', 'restart_xtr: the refresh completes') or diag($err);
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	is(psql_ok("SELECT string_agg(attempt::text, ',' ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}'"),
		'1,1,0,0', 'restart_xtr: the two interrupted chunks were loaded again, into new staging tables');
	settle_and_check($s, 'recover');
}

# --- the endpoint restarts during publication ------------------------------------------

{
	my $s = scenario('restart_pub');
	exchange_fault($s, 6000);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 60), 'restart_pub: publishing');
	usleep(300_000);
	sandbox_cmd('restart-ch');
	my ($rc, $out, $err) = bg_finish($h);
	like($err, qr/HINT:.*dpwin\.recover\('\Q$s->{inv}\E'\)/, 'restart_pub: the refresh fails, naming recover()')
	  or diag($err);
	check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
	my $seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ exchange_re($s) } ch_log_since($seq)), 1, 'restart_pub: recover exchanged once');
}

# --- a staging INSERT times out ---------------------------------------------------------

{
	my $s = scenario('ins_timeout', server => $slow);
	my $seq = ch_log_seq();
	my $stg = "$s->{prefix}stg_0_0";
	fault(pattern => "INSERT INTO `$db`.`$stg`", mode => 'delay', ms => 2500, count => 1);
	is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', 'ins_timeout: the refresh completes');
	# The timed-out INSERT still runs on the server; when it does, its
	# staging table has been dropped already.
	ok(wait_answered($seq, qr/^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/), 'ins_timeout: the timed-out INSERT has ended');
	is((grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/ } ch_log_since($seq))[0]{status}, '404',
		'ins_timeout: it found its attempt\'s staging table gone');
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
		'ins_timeout: chunk 0 was loaded by its second attempt');
	settle_and_check($s, 'recover');
}

# --- a staging CREATE times out and runs after the refresh completed ---------------------
#
# The late statement creates a table of the completed invocation after its
# clean-up: recover() of the completed invocation drops it.

{
	my $s = scenario('create_timeout', server => $slow);
	my $seq = ch_log_seq();
	my $stg = "$s->{prefix}stg_0_0";
	fault(pattern => "CREATE TABLE `$db`.`$stg`", mode => 'delay', ms => 5000, count => 1);
	is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', 'create_timeout: the refresh completes');
	is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
		'create_timeout: chunk 0 was loaded by its second attempt');
	ok(wait_answered($seq, qr/^CREATE TABLE `\Q$db\E`\.`\Q$stg\E`/), 'create_timeout: the timed-out CREATE has run');
	is_deeply(leftovers(), [$stg], 'create_timeout: and left its table behind');
	check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
	settle_and_check($s, 'recover');
}

# --- the EXCHANGE times out and runs later ----------------------------------------------

{
	my $s = scenario('x_late', server => $slow);
	my $seq = ch_log_seq();
	exchange_fault($s, 2500);
	# Were dpwin to exchange again at once, its next statement (renaming the
	# old table to the backup) would run after the late EXCHANGE.
	fault(pattern => "RENAME TABLE `$db`.`$s->{prefix}gen`", mode => 'delay', ms => 1200, count => 1);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	like($err, qr/^08006: .*EXCHANGE/, 'x_late: the refresh fails: the EXCHANGE got no answer') or diag($err);
	is(scalar(grep { $_->{query} =~ exchange_re($s) } ch_log_since($seq)), 0,
		'x_late: no second EXCHANGE was sent while the first may still run');
	ok(wait_answered($seq, exchange_re($s)), 'x_late: the timed-out EXCHANGE has run');
	ch_control('POST', '/faults/clear');
	check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ exchange_re($s) } ch_log_since($seq)), 0, 'x_late: recover sent no EXCHANGE');
}

# --- the EXCHANGE times out and never runs -----------------------------------------------

{
	my $s = scenario('x_never', server => $slow);
	exchange_fault($s, 8000);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	like($err, qr/^08006: .*EXCHANGE/, 'x_never: the refresh fails: the EXCHANGE got no answer') or diag($err);
	# The endpoint still holds the EXCHANGE: a restart drops it unrun.
	sandbox_cmd('restart-ch');
	check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
	my $seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ exchange_re($s) } ch_log_since($seq)), 1, 'x_never: recover exchanged once');
}

# --- recover()'s own EXCHANGE times out and runs later ------------------------------------

{
	my $s = scenario('x_rec_late', server => $slow);
	exchange_fault($s, 8000);
	like(psql_err(refresh_sql($s->{route}, $E2, $s->{inv})), qr/^08006: .*EXCHANGE/,
		'x_rec_late: the refresh fails: the EXCHANGE got no answer');
	sandbox_cmd('restart-ch');
	my $seq = ch_log_seq();
	exchange_fault($s, 2500);
	like(psql_err("SELECT * FROM dpwin.recover('$s->{inv}')"), qr/^08006: .*EXCHANGE/,
		'x_rec_late: recover retries, and its EXCHANGE gets no answer either');
	is(scalar(grep { $_->{query} =~ exchange_re($s) } ch_log_since($seq)), 0,
		'x_rec_late: recover did not exchange again');
	ok(wait_answered($seq, exchange_re($s)), 'x_rec_late: its EXCHANGE has run');
	check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ exchange_re($s) } ch_log_since($seq)), 0, 'x_rec_late: the second recover sent no EXCHANGE');
}

teardown();
psql_ok("DROP SERVER $slow CASCADE");
done_testing();
