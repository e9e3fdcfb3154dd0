package DpwinChaos;

# The seeded chaos run of test/chaos.sh (docs/chaos.md).
#
# Three targets -- day-partitioned, month-partitioned, unpartitioned --
# each with its route from one source table, whose one-day windows
# ending 2026-10-01 to 2026-10-04 a writer process keeps replacing, in one
# transaction each, by a new "batch": rows that name their batch, their
# number within it and the batch's size (v = "b<batch>|<i>|<n>"; row 0
# twice).  So any snapshot of the source holds exactly one whole batch per
# window, and so must the target: a reader process polls every target
# throughout and counts each poll in which a window holds anything but one
# whole batch (a gap, a mix or a half-replaced window).
#
# The seed and the trial count alone decide the schedule
# (DpwinChaosPlan): each trial refreshes one window of one route and hits
# it with one fault at one step of the refresh, named by the statement
# dpwin sends there.  The endpoint holds that statement, and the fault
# strikes while it is held: SIGKILL of the coordinator or of the chunk
# worker that sent it (the cluster restarts), an immediate PostgreSQL
# restart, a ClickHouse endpoint restart (which drops the held statement),
# a cancel or terminate of the caller, or a lease takeover (a second
# refresh waits for the lease and takes it when the first one's
# coordinator is terminated); then the hold is released and the statement
# runs, after its client may have gone.  The endpoint's own faults answer
# the statement with an error, or run it and drop the reply.  A fault
# that does not fire (its step never comes, its process is not there)
# fails the trial.  After it:
#   old/new   the target is exactly the old rows, or the old rows outside
#             the window plus one whole batch of the window that is
#             exactly the rows PostgreSQL generates for that batch;
#   converge  recover() of every unsettled invocation (abandon() of a
#             failed one that left tables) leaves every invocation in a
#             final state, and the target still old or new;
#   tables    no dpwin table is left in ClickHouse but backups, each one a
#             backup the journal names;
#   journal   every invocation's state is a legal one and route_state never
#             moved backwards.
# At the end a clean refresh of every window must complete, and every
# target must equal the source computed in PostgreSQL.

use strict;
use warnings;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_routes bg_psql bg_finish fault new_uuid micros route_id
  invocation_prefix pg_up coordinator_pid ch_event_row_sql pg_event_row_sql refresh_sql postmaster_pid);
use DpwinEndpoint qw(set_query_ids release running log_entries faults_pending);
use DpwinChaosPlan qw(%STEPS make_plan describe);

my $db;
my @DAYS = @DpwinChaosPlan::WINDOWS;
my %ENGINE = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => "ORDER BY id");
my %ROUTE_OPT = (day => "interval '6 hours', parallelism => 2",
	month => "interval '4 hours', parallelism => 3",
	flat => "interval '8 hours', parallelism => 2");
my @SHAPES = @DpwinChaosPlan::SHAPES;
my @TRIAL_SHAPES = @SHAPES;		# --shapes: the targets the trials hit
my @FINAL = qw(completed failed snapshot_expired abandoned);
my @LEGAL = qw(planned extracting staged verified publishing unknown published evidenced completed failed
  snapshot_expired abandoned);

my (%stat, @failures, %rs_high, @trial_started);
my $trial_no = 0;

sub say_ { print STDOUT "@_\n"; }

sub fail_
{
	my ($what) = @_;
	push @failures, "trial $trial_no: $what";
	say_("  FAIL: $what");
}

# ---- setup --------------------------------------------------------------------

sub setup_chaos
{
	$db = "chaos_$$";
	ch_control('POST', '/faults/clear');
	fresh_fixture($db, $db);
	psql_ok("CREATE SEQUENCE $db.batch;
		CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz, v text);
		CREATE INDEX src_w ON $db.src (w);
		-- batch b of the window starting at d: n rows spread over the day, row 0 twice
		CREATE FUNCTION $db.batch_rows(d timestamptz, b bigint)
			RETURNS TABLE (id bigint, w timestamptz, v text) LANGUAGE sql IMMUTABLE AS \$\$
			SELECT b * 1000 + i, d + (i * 86399.0 / n) * interval '1 second' + interval '0.25 seconds',
				'b' || b || '|' || i || '|' || n
			FROM (SELECT 5 + (b * 7) % 23 AS n) s, generate_series(0, n - 1) i
			CROSS JOIN LATERAL generate_series(1, CASE WHEN i = 0 THEN 2 ELSE 1 END)
			\$\$;
		CREATE FUNCTION $db.write_batch(d timestamptz) RETURNS bigint LANGUAGE plpgsql AS \$\$
			DECLARE b bigint := nextval('$db.batch');
			BEGIN
				DELETE FROM $db.src WHERE w >= d AND w < d + interval '1 day';
				INSERT INTO $db.src SELECT * FROM $db.batch_rows(d, b);
				RETURN b;
			END \$\$;
		INSERT INTO $db.src VALUES (1, NULL, 'never extracted'), (2, '2026-09-29 12:00:00+00', 'never extracted');");
	psql_ok("SELECT $db.write_batch(timestamptz '$_' - interval '1 day')") for @DAYS;
	for my $sh (@SHAPES)
	{
		ch_ok("CREATE TABLE `$db`.`tgt_$sh` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
			  . " ENGINE = MergeTree $ENGINE{$sh}");
		# kept rows: before the windows, a NULL window, after them
		ch_ok("INSERT INTO `$db`.`tgt_$sh` VALUES (-1, '2026-09-15 00:00:00', 'keep'), (-1, '2026-09-15 00:00:00', 'keep'),"
			  . " (-2, NULL, 'keep'), (-3, '2026-10-20 00:00:00', 'keep')");
		psql_ok("SELECT dpwin.create_route('${db}_$sh', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', 'tgt_$sh',"
			  . " interval '1 day', $ROUTE_OPT{$sh})");
		for my $e (@DAYS)
		{
			my $st = psql_ok("SELECT state FROM dpwin_refresh('${db}_$sh', '$e')");
			die "initial refresh of $sh $e: $st\n" unless $st eq 'completed';
		}
	}
}

sub teardown
{
	ch_control('POST', '/faults/clear');
	release('');
	set_query_ids('visible');
	drop_routes(map { "${db}_$_" } @SHAPES);
	psql_ok("DROP SCHEMA $db CASCADE");
	ch_ok("DROP DATABASE `$db`");
}

# ---- rows and generations ------------------------------------------------------

# The target's rows (undef if it cannot be read), the UUID its name had
# as the statement began ('empty' when no row came back), the names of
# the parts the rows came from, and ClickHouse's HTTP status (0: no
# answer, such as while the endpoint restarts, or the read cancelled by
# its stop: code 394, as a server's shutdown cancels running queries).
sub ch_rows_and_parts_of
{
	my ($sh) = @_;
	my ($code, $body) = ch("SELECT " . ch_event_row_sql() . ", _part, (SELECT toString(uuid) FROM system.tables"
		  . " WHERE database = '$db' AND name = 'tgt_$sh') FROM `$db`.`tgt_$sh` FORMAT TSVRaw");
	$code = 0 if $code != 200 && ($body // '') =~ /^Code: 394\. /;
	return (undef, undef, undef, $code) unless $code == 200;
	my (@rows, %parts, $uuid);
	for (grep { $_ ne '' } split /\n/, $body)
	{
		my ($r, $p, $u) = split /\t/;
		push @rows, $r;
		$parts{$p} = 1;
		$uuid = $u;
	}
	return ([ sort @rows ], $uuid // 'empty', [ sort keys %parts ], $code);
}

sub ch_rows_of { my ($rows) = ch_rows_and_parts_of(@_); return $rows; }

# Split rows into those inside [lo, hi) and the others.
sub split_window
{
	my ($rows, $lo, $hi) = @_;
	my (@in, @out);
	for (@$rows)
	{
		my (undef, $m) = split /\|/;
		if ($m ne 'NULL' && $m >= $lo && $m < $hi) { push @in, $_ } else { push @out, $_ }
	}
	return (\@in, \@out);
}

# The batch the rows of one window hold, if they are one whole batch by
# their own account (the reader's check); undef otherwise.
sub whole_batch
{
	my ($rows) = @_;
	my (%b, %i, $n);
	for (@$rows)
	{
		my (undef, undef, $v) = split /\|/, $_, 3;
		my ($b, $i, $nn) = $v =~ /^b(\d+)\|(\d+)\|(\d+)$/ or return undef;
		$b{$b}++;
		$i{$i}++;
		$n = $nn;
	}
	return undef unless keys %b == 1 && defined $n && keys %i == $n;
	for my $i (0 .. $n - 1) { return undef unless ($i{$i} // 0) == ($i == 0 ? 2 : 1) }
	return (keys %b)[0];
}

# PostgreSQL's rows of batch $b of the window ending $e.
sub pg_batch_rows
{
	my ($e, $b) = @_;
	my $out = psql_ok("SELECT " . pg_event_row_sql() . " FROM $db.batch_rows(timestamptz '$e' - interval '1 day', $b)");
	return [ sort split /\n/, $out ];
}

sub same { my ($a, $b) = @_; return join("\n", @$a) eq join("\n", @$b); }

# 'old' (the table of UUID $old_uuid with the rows @$old), 'new' (another
# table: the old rows outside the window and one whole batch of the
# window, as PostgreSQL generates it) or a description of what else the
# target is.  The UUID tells a new generation from the old one even when
# the window's batch did not change.
sub judge
{
	my ($sh, $old, $old_uuid, $e) = @_;
	my ($rows, $uuid) = ch_rows_and_parts_of($sh);
	return 'unreadable' unless $rows;
	if ($uuid eq $old_uuid)
	{
		return same($rows, $old) ? 'old' : 'the old table with other rows';
	}
	my $hi = micros($e);
	my $lo = $hi - 86_400_000_000;
	my ($in, $out) = split_window($rows, $lo, $hi);
	my (undef, $old_out) = split_window($old, $lo, $hi);
	return 'a mix: the rows outside the window changed' unless same($out, $old_out);
	my $b = whole_batch($in);
	return 'a mix: the window is not one whole batch' unless defined $b;
	return "a mix: batch $b differs from PostgreSQL's rows" unless same($in, pg_batch_rows($e, $b));
	return 'new';
}

# ---- the reader and the writer -------------------------------------------------

my @children;

sub spawn
{
	my ($code) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		$SIG{TERM} = sub { POSIX::_exit(0) };
		$code->();
		POSIX::_exit(0);
	}
	push @children, $pid;
	return $pid;
}

# The reader: polls every target, appends "polls bad down" counts and any
# bad poll to $file.  A poll that ClickHouse does not answer (the endpoint
# restarts) counts as down; one it answers with an error (a target that is
# missing) or with anything but the kept rows and one whole batch per
# window is bad.
sub reader
{
	my ($file) = @_;
	my ($polls, $bad, $down) = (0, 0, 0);
	my %bounds = map { $_ => micros($_) } @DAYS;
	my $last = time;
	while (1)
	{
		for my $sh (@SHAPES)
		{
			my $t0 = time;
			my ($rows, $uuid, $parts, $code) = eval { ch_rows_and_parts_of($sh) };
			my $t1 = time;
			if (!$code) { $down++; sleep 0.2; next }
			$polls++;
			my @issues;
			if (!$rows)
			{
				push @issues, "the target cannot be read (HTTP $code)";
				($uuid, $parts) = ('none', []);
			}
			else
			{
				my $keep = grep { /\|keep$/ } @$rows;
				push @issues, "$keep kept rows" unless $keep == 4;
				for my $e (@DAYS)
				{
					my ($in) = split_window($rows, $bounds{$e} - 86_400_000_000, $bounds{$e});
					push @issues, "window $e is not one whole batch" unless defined whole_batch($in);
				}
			}
			if (@issues)
			{
				$bad++;
				open my $fh, '>>', "$file.bad";
				printf $fh "%d\t%d\t%s\t%s\ttgt_$sh: @issues\n", $t0 * 1000, $t1 * 1000, $uuid, "@$parts";
				close $fh;
			}
		}
		if (time - $last > 1)
		{
			open my $fh, '>', "$file.tmp";
			print $fh "$polls $bad $down\n";
			close $fh;
			rename "$file.tmp", $file;
			$last = time;
		}
	}
}

# The writer: replaces a random window by a new batch, again and again.
sub writer
{
	my ($file, $seed) = @_;
	srand($seed);
	my $n = 0;
	while (1)
	{
		my $d = $DAYS[ int(rand(@DAYS)) ];
		my ($rc) = eval { psql("SELECT $db.write_batch(timestamptz '$d' - interval '1 day')", timeout => 30) };
		$rc //= 1;
		if ($rc == 0) { $n++ } else { sleep 0.5 }
		open my $fh, '>', "$file.tmp";
		print $fh "$n\n";
		close $fh;
		rename "$file.tmp", $file;
		sleep(0.05 + rand(0.4));
	}
}

sub read_counts
{
	my ($file) = @_;
	open my $fh, '<', $file or return ();
	my $l = <$fh> // '';
	close $fh;
	return split ' ', $l;
}

# ---- PostgreSQL and ClickHouse -------------------------------------------------

sub sandbox
{
	my ($what) = @_;
	my $out = `test/sandbox.sh $what 2>&1`;
	die "test/sandbox.sh $what failed: $out" if $?;
}

sub wait_pg
{
	return 1 if wait_until(\&pg_up, 30);
	sandbox('restart-pg');
	return wait_until(\&pg_up, 60);
}

sub caller_pid
{
	my ($app) = @_;
	my ($rc, $out) = psql("SELECT pid FROM pg_stat_activity WHERE application_name = '$app'", timeout => 10);
	return $rc == 0 && $out =~ /^\d+$/ ? $out : undef;
}

# The chunk worker that runs chunk $chunk_no of invocation $inv, as the
# journal and pg_stat_activity show it; undef if none does.
sub worker_of
{
	my ($inv, $chunk_no) = @_;
	my $pid;
	wait_until(sub {
			my ($rc, $out) = psql("SELECT c.worker_pid FROM dpwin.chunk c JOIN pg_stat_activity a ON a.pid = c.worker_pid"
				  . " AND a.backend_type = 'dpwin chunk worker'"
				  . " WHERE c.invocation_id = '$inv' AND c.chunk_no = $chunk_no", timeout => 10);
			$pid = $out if $rc == 0 && $out =~ /^\d+$/;
			defined $pid;
		}, 10);
	return $pid;
}

sub inv_state
{
	my ($inv) = @_;
	return psql_ok("SELECT coalesce((SELECT state FROM dpwin.invocation WHERE invocation_id = '$inv'), '')");
}

# ---- the faults -------------------------------------------------------------------

# The text of step $step's statement for invocation $inv of shape $sh.
sub step_text
{
	my ($step, $sh, $inv) = @_;
	my $p = $STEPS{$step};
	$p =~ s/DB/$db/g;
	$p =~ s/%s/invocation_prefix(route_id("${db}_$sh"), $inv)/e;
	$p =~ s/%t/tgt_$sh/g;
	return $p;
}

# Does the statement text $q contain $p, regardless of case, as the
# endpoint matches a fault's pattern?
sub matches { my ($q, $p) = @_; return index(lc $q, lc $p) >= 0; }

# Strike trial $t's fault while the endpoint holds the statement $held of
# invocation $inv, whose caller runs as $app.  Returns '' once it fired,
# or why it did not.
sub strike
{
	my ($t, $inv, $app, $held) = @_;
	my $kind = $t->{kind};
	if ($kind eq 'kill_coordinator')
	{
		my $pid = coordinator_pid($inv) // return 'no coordinator holds the lease';
		return kill('KILL', $pid) == 1 ? '' : "SIGKILL of the coordinator $pid failed";
	}
	if ($kind eq 'kill_worker')
	{
		my ($chunk) = $held =~ /_stg_(\d+)_\d+/;
		return "the held statement names no staging table: $held" unless defined $chunk;
		my $pid = worker_of($inv, $chunk) // return "no worker runs chunk $chunk";
		return kill('KILL', $pid) == 1 ? '' : "SIGKILL of the worker $pid failed";
	}
	if ($kind eq 'restart_pg')
	{
		my $before = postmaster_pid();
		sandbox('restart-pg');
		wait_pg() or return 'PostgreSQL did not come back';
		return postmaster_pid() != $before ? '' : 'the postmaster is the same process';
	}
	if ($kind eq 'restart_ch')
	{
		sandbox('restart-ch');
		return '';
	}
	if ($kind eq 'cancel' || $kind eq 'terminate')
	{
		my $pid = caller_pid($app) // return 'the caller is not connected';
		my $f = $kind eq 'cancel' ? 'pg_cancel_backend' : 'pg_terminate_backend';
		my ($rc, $out) = psql("SELECT $f($pid)", timeout => 10);
		return $rc == 0 && $out eq 't' ? '' : "$f($pid) answered $out";
	}
	if ($kind eq 'takeover')
	{
		my $pid = coordinator_pid($inv) // return 'no coordinator holds the lease';
		# a second refresh waits for the lease, then the first
		# coordinator is terminated and the second takes over
		my $h2 = do {
			local $ENV{PGOPTIONS} = '-c dpwin.lease_timeout=60s';
			bg_psql(refresh_sql("${db}_$t->{shape}", $t->{window}), "${app}_2");
		};
		# its coordinator polls for the lease, sleeping on its latch
		# between tries (src/lease.c)
		my $waits = wait_until(sub {
				my ($rc, $out) = psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dpwin coordinator'"
					  . " AND pid <> $pid AND wait_event_type = 'Extension'", timeout => 10);
				$rc == 0 && $out >= 1;
			}, 30);
		my ($rc, $out) = psql("SELECT pg_terminate_backend($pid)", timeout => 10);
		release('');
		my ($rc2, $out2, $err2) = bg_finish($h2);
		my ($st) = $err2 =~ /ERROR:\s+(?:[0-9A-Z]{5}: )?(.{0,120})/;
		say_("  the second refresh: " . ($rc2 == 0 ? $out2 : "error: " . ($st // $err2)));
		$stat{"takeover: the second refresh " . ($rc2 == 0 ? $out2 : 'failed')}++;
		return 'the second refresh never waited for the lease' unless $waits;
		return $rc == 0 && $out eq 't' ? '' : "pg_terminate_backend($pid) answered $out";
	}
	die "unknown fault kind $kind\n";
}

# Run trial $t of the plan (DpwinChaosPlan::make_plan).
sub trial
{
	my ($t) = @_;
	my ($sh, $e, $kind) = @$t{qw(shape window kind)};
	my $route = "${db}_$sh";
	set_query_ids($t->{mode});
	my ($old, $old_uuid) = ch_rows_and_parts_of($sh);
	die "the target tgt_$sh cannot be read\n" unless $old;
	my $inv = new_uuid();
	my $app = "chaos_caller_$trial_no";
	my $seq = ch_log_seq();
	my $text = $kind eq 'none' ? undef : step_text($t->{step}, $sh, $inv);
	if ($kind eq 'ep_error') { fault(pattern => $text, count => 1, mode => 'error', code => $t->{code}) }
	elsif ($kind eq 'ep_lost') { fault(pattern => $text, count => 1, mode => 'lost') }
	elsif ($kind ne 'none') { fault(pattern => $text, count => 1, mode => 'hold') }
	my $h = bg_psql(refresh_sql($route, $e, $inv), $app);
	my $why = '';
	if (defined $text && $kind !~ /^ep_/)
	{
		my ($held) = map { $_->{query} } grep { $_->{phase} eq 'holding' && matches($_->{query}, $text) } running();
		wait_until(sub {
				($held) = map { $_->{query} } grep { $_->{phase} eq 'holding' && matches($_->{query}, $text) } running();
				defined $held;
			}, 120);
		if (defined $held)
		{
			$why = strike($t, $inv, $app, $held);
		}
		else
		{
			$why = "the step $t->{step} never came";
		}
		release('');
	}
	my ($rc, $out, $err) = bg_finish($h);
	wait_pg() or die "PostgreSQL did not come back\n";
	wait_until(sub { my ($c) = ch('SELECT 1'); $c == 200 }, 60) or die "ClickHouse did not come back\n";
	# the held statement, released, runs on: let it end
	wait_until(sub { !grep { defined $text && matches($_->{query}, $text) } running() }, 120)
	  or fail_('the released statement is still running two minutes later');
	if ($kind =~ /^ep_/)
	{
		# (the log has a statement when it ends: several workers' statements
		# at one step may end in any order)
		my @hit = grep { matches($_->{query}, $text) } log_entries($seq);
		my $want = $kind eq 'ep_lost' ? 'lost' : 'an error';
		my @faulted = grep { $kind eq 'ep_lost' ? $_->{status} eq 'lost' : $_->{status} =~ /^[45]\d\d$/ } @hit;
		$why = "the step $t->{step} never came" unless @hit;
		$why ||= "no statement at $t->{step} was $want (answered: @{[ map { $_->{status} } @hit ]})" unless @faulted;
	}
	my @pending = grep { defined $text && index($_, $text) >= 0 } faults_pending();
	$why ||= 'the fault is still pending' if @pending;
	ch_control('POST', '/faults/clear');
	if ($kind eq 'none')
	{
		$why = "the refresh without a fault did not complete: $out $err" unless $rc == 0 && $out eq 'completed';
	}
	if ($why) { fail_("the fault did not fire: $why") } else { $stat{"fired: $kind"}++ }
	# a coordinator whose caller went away goes on alone: let it end
	wait_until(sub {
			my ($rc, $n) = psql("SELECT count(*) FROM pg_stat_activity"
				  . " WHERE backend_type IN ('dpwin coordinator', 'dpwin chunk worker')", timeout => 10);
			$rc == 0 && $n == 0;
		}, 120) or fail_('dpwin processes are still running two minutes after the refresh');
	my $state = inv_state($inv);
	my ($sqlstate) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	my $caller = $rc == 0 ? $out : 'error ' . ($sqlstate // 'without SQLSTATE (connection lost)');
	check_names($inv, $sh);
	my $j = judge($sh, $old, $old_uuid, $e);
	$stat{"after the fault: $j"}++;
	fail_("after the fault the target is $j") unless $j =~ /^(old|new)$/;
	settle($sh);
	my $j2 = judge($sh, $old, $old_uuid, $e);
	fail_("after recovery the target is $j2") unless $j2 =~ /^(old|new)$/;
	my $final = inv_state($inv);
	say_("  outcome: the caller $caller; journal $state, settled $final; the target $j, then $j2");
	$stat{"$kind: $j, settled $final"}++;
	check_tables();
	check_journal($sh);
	return $kind;
}

# The names the journal records for invocation $inv's staging tables
# begin with the prefix the tests derive (DpwinFixture::invocation_prefix).
sub check_names
{
	my ($inv, $sh) = @_;
	my $prefix = invocation_prefix(route_id("${db}_$sh"), $inv);
	my @bad = grep { $_ ne '' && index($_, $prefix) != 0 } split /\n/,
	  psql_ok("SELECT staging_table FROM dpwin.chunk WHERE invocation_id = '$inv' AND staging_table IS NOT NULL");
	fail_("staging tables not named with the prefix $prefix: @bad") if @bad;
}

# recover() every unsettled invocation of route $sh, abandon() failed ones
# that left tables; all must end final.
sub settle
{
	my ($sh) = @_;
	for my $round (1 .. 4)
	{
		my @open = split /\n/, psql_ok("SELECT invocation_id FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
			  . " WHERE r.route_name = '${db}_$sh' AND i.state NOT IN ('" . join("','", @FINAL) . "')");
		last unless @open;
		for my $inv (@open)
		{
			my ($rc, $out, $err) = psql("SELECT state FROM dpwin.recover('$inv')", timeout => 120);
			$stat{recovered}++ if $rc == 0;
		}
		fail_("recover() did not converge: " . join(', ', map { "$_ " . inv_state($_) } @open)) if $round == 4;
	}
	# tables left: abandon() a failed invocation's, recover() a completed
	# one's (its clean-up was refused after the publication, with a warning
	# that names recover())
	my $left = ch_ok("SELECT name FROM system.tables WHERE database = '$db' AND startsWith(name, '_dpwin_')"
		  . " AND NOT startsWith(name, '_dpwin_backup_') FORMAT TSVRaw");
	if ($left ne '')
	{
		for my $row (split /\n/, psql_ok("SELECT invocation_id || ' ' || state FROM dpwin.invocation"
			  . " WHERE state IN ('failed', 'completed')"
			  . " AND route_id = (SELECT route_id FROM dpwin.route WHERE route_name = '${db}_$sh')"))
		{
			my ($inv, $state) = split / /, $row;
			(my $hex = $inv) =~ s/-//g;
			$hex = substr($hex, 0, 12);
			next unless $left =~ /_\Q$hex\E_/;
			my $f = $state eq 'failed' ? 'abandon' : 'recover';
			my ($rc) = psql("SELECT state FROM dpwin.$f('$inv')");
			$stat{$f eq 'abandon' ? 'abandoned' : 'cleaned up'}++ if $rc == 0;
		}
	}
}

sub check_tables
{
	my @left = grep { $_ ne '' } split /\n/, ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
		  . " AND startsWith(name, '_dpwin_') AND NOT startsWith(name, '_dpwin_backup_') FORMAT TSVRaw");
	fail_("tables left: @left") if @left;
	my %named = map { $_ => 1 } split /\n/, psql_ok("SELECT backup_table FROM dpwin.invocations WHERE backup_table IS NOT NULL");
	my @orphans = grep { $_ ne '' && !$named{$_} } split /\n/, ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
		  . " AND startsWith(name, '_dpwin_backup_') FORMAT TSVRaw");
	fail_("backups no invocation names: @orphans") if @orphans;
}

sub check_journal
{
	my ($sh) = @_;
	my @bad = split /\n/, psql_ok("SELECT invocation_id || ' ' || state FROM dpwin.invocation"
		  . " WHERE state NOT IN ('" . join("','", @LEGAL) . "')");
	fail_("illegal states: @bad") if @bad;
	my @open = split /\n/, psql_ok("SELECT invocation_id || ' ' || state FROM dpwin.invocation i JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name LIKE '${db}_%' AND i.state NOT IN ('" . join("','", @FINAL) . "')");
	fail_("unsettled after recovery: @open") if @open;
	my $rs = psql_ok("SELECT coalesce((SELECT (extract(epoch FROM s.last_interval_end) * 1000000)::bigint"
		  . " FROM dpwin.route_state s JOIN dpwin.route r USING (route_id) WHERE r.route_name = '${db}_$sh'), 0)");
	fail_("route_state of $sh moved backwards") if $rs < ($rs_high{$sh} // 0);
	$rs_high{$sh} = $rs if $rs > ($rs_high{$sh} // 0);
}

# The endpoint's query log (it survives restarts in the sandbox's file)
# from 5 s before a bad poll to its end: the last 40 statements that
# changed the target of shape $sh or its route's tables, and when they
# arrived.
sub statements_around
{
	my ($from, $to, $sh) = @_;
	my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '${db}_$sh'");
	my $file = "$ENV{DPWIN_SANDBOX_DIR}/ch_queries.log";
	open my $fh, '<', $file or return ("no query log at the sandbox");
	my @out;
	while (my $l = <$fh>)
	{
		my (undef, $ms, $qid, undef, $status, $query) = split /\t/, $l, 6;
		next unless defined $query && $ms =~ /^\d+$/ && $ms >= $from - 5000 && $ms <= $to;
		next unless $query =~ /^\s*(ALTER|EXCHANGE|RENAME|DROP|CREATE|DELETE|INSERT)/i
		  && $query =~ /`tgt_$sh`|`_dpwin_(backup_)?${rid}_/;
		chomp $query;
		push @out, sprintf('%+6d ms %s %s %.160s', $ms - $from, $status, $qid, $query);
	}
	close $fh;
	return @out > 40 ? @out[-40 .. -1] : @out;
}

# ---- the run -------------------------------------------------------------------------

sub main
{
	my %o = DpwinChaosPlan::options(@_);
	@TRIAL_SHAPES = @{ $o{shapes} };
	my $trials = $o{trials};
	my @plan = make_plan($o{seed}, $trials, \@TRIAL_SHAPES);
	$| = 1;
	say_("chaos: seed $o{seed}, $trials trials" . (defined $o{length} ? ", at most $o{length} s" : ''));
	my $start = time;
	setup_chaos();
	my $dir = "/tmp/dpwin_chaos_$$";
	mkdir $dir;
	spawn(sub { reader("$dir/reader") });
	spawn(sub { writer("$dir/writer", $o{seed} + 1) });
	my $until = defined $o{length} ? $start + $o{length} : undef;
	my %kinds;
	my $died = 0;
	for my $t (@plan)
	{
		if (defined $until && time >= $until)
		{
			say_(sprintf('chaos: --length %d s reached: trials %d to %d not run', $o{length}, $t->{no}, $trials));
			last;
		}
		$trial_no = $t->{no};
		push @trial_started, [ $trial_no, time ];
		say_(describe($t));
		my $kind = eval { trial($t) };
		if (!defined $kind)
		{
			fail_("the trial died: $@");
			eval { ch_control('POST', '/faults/clear'); release(''); };
			last if ++$died >= 3 || !wait_pg();
			next;
		}
		$died = 0;
		$kinds{"$kind on $t->{shape}"}++;
		if ($trial_no % 10 == 0)
		{
			psql("SELECT count(*) FROM dpwin.drop_backups('${db}_$_', 2)") for @SHAPES;
		}
	}
	my $n = $trial_no;
	$trial_no = 'end';
	kill 'TERM', @children;
	waitpid($_, 0) for @children;
	my ($polls, $bad, $down) = read_counts("$dir/reader");
	my ($writes) = read_counts("$dir/writer");
	if (-s "$dir/reader.bad")
	{
		open my $fh, '<', "$dir/reader.bad";
		my @l = <$fh>;
		close $fh;
		my ($from, $to, $uuid, $parts, $what) = split /\t/, $l[0], 5;
		chomp $what;
		my $during = (grep { $_->[1] * 1000 <= $from } @trial_started)[-1];
		fail_("the reader saw " . scalar(@l) . " bad polls, first: $what"
			  . " (during trial " . ($during ? $during->[0] : 'none') . ", target UUID $uuid, parts: $parts)");
		# whose generation, or whose old target, the poll read
		say_("  that UUID is $_")
		  for $uuid !~ /^[0-9a-f-]{36}$/ ? () : split /\n/, psql_ok(
			"SELECT CASE WHEN p.generation_uuid = '$uuid' THEN 'the generation' ELSE 'the target before' END"
			  . " || ' of invocation ' || p.invocation_id || ' (' || i.state || ', window ' || i.window_hi || ')'"
			  . " FROM dpwin.publication p JOIN dpwin.invocations i USING (invocation_id)"
			  . " WHERE '$uuid' IN (p.generation_uuid, p.target_uuid_before)");
		my ($sh) = $what =~ /^tgt_(\w+):/;
		say_("  $_") for statements_around($from, $to, $sh);
	}
	# the end: every window refreshed cleanly equals the source
	set_query_ids('visible');
	for my $sh (@SHAPES)
	{
		for my $e (@DAYS)
		{
			my ($rc, $out, $err) = psql("SELECT state FROM dpwin_refresh('${db}_$sh', '$e')");
			fail_("final refresh of $sh $e: $out $err") unless $rc == 0 && $out eq 'completed';
		}
		my $rows = ch_rows_of($sh);
		my $src = psql_ok("SELECT id || '|' || (extract(epoch FROM w) * 1000000)::bigint || '|' || v FROM $db.src"
			  . " WHERE w >= timestamptz '$DAYS[0]' - interval '1 day' AND w < '$DAYS[-1]'");
		my @exp = sort((grep { /\|keep$/ } @$rows), split /\n/, $src);
		fail_("the final target $sh differs from the source") unless same($rows, \@exp);
	}
	check_tables();
	teardown();
	system('rm', '-rf', $dir);
	my $failed = @failures ? scalar(keys %{ { map { (/^trial (\d+)/)[0] // 'end' => 1 } @failures } }) : 0;
	say_(sprintf('chaos: seed %d, %d trials in %d s (%d writes to the source, %d reader polls, %d while ClickHouse was down)',
			$o{seed}, $n, time - $start, $writes // 0, $polls // 0, $down // 0));
	say_("chaos: trials by fault and shape: " . join(', ', map { "$_ $kinds{$_}" } sort keys %kinds));
	say_("chaos: outcomes: " . join(', ', map { "$_ $stat{$_}" } sort keys %stat));
	say_("chaos: $_") for @failures;
	say_(sprintf('%d passed, %d failed', $n - $failed, $failed));
	return $failed ? 1 : 0;
}

1;
