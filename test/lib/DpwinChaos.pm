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
# Each trial refreshes a random window of a random route and hits it with
# a random fault at a random moment: SIGKILL of the coordinator or of a
# chunk worker (the cluster restarts), an immediate PostgreSQL restart, a
# ClickHouse endpoint restart, a cancel or terminate of the caller, an
# endpoint fault (error, lost reply, delay) on a random statement of the
# refresh, or a lease takeover (a second refresh waits for the lease and
# takes it when the first one's coordinator is terminated).  After it:
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
use DpwinFixture qw(fresh_fixture drop_routes bg_psql bg_finish fault new_uuid);
use DpwinEndpoint qw(set_query_ids release running);

my $db;
my @DAYS = map { sprintf('2026-10-%02d 00:00:00+00', $_) } 1 .. 4;
my %ENGINE = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => "ORDER BY id");
my %ROUTE_OPT = (day => "interval '6 hours', parallelism => 2",
	month => "interval '4 hours', parallelism => 3",
	flat => "interval '8 hours', parallelism => 2");
my @SHAPES = sort keys %ENGINE;
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

sub setup
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
# as the statement began ('empty' when no row came back), and the names
# of the parts the rows came from.
sub ch_rows_and_parts_of
{
	my ($sh) = @_;
	my ($code, $body) = ch("SELECT concat(toString(id), '|', ifNull(toString(toUnixTimestamp64Micro(w)), 'NULL'), '|',"
		  . " ifNull(v, 'NULL')), _part, (SELECT toString(uuid) FROM system.tables"
		  . " WHERE database = '$db' AND name = 'tgt_$sh') FROM `$db`.`tgt_$sh` FORMAT TSVRaw");
	return () unless $code == 200;
	my (@rows, %parts, $uuid);
	for (grep { $_ ne '' } split /\n/, $body)
	{
		my ($r, $p, $u) = split /\t/;
		push @rows, $r;
		$parts{$p} = 1;
		$uuid = $u;
	}
	return ([ sort @rows ], $uuid // 'empty', [ sort keys %parts ]);
}

sub ch_rows_of { my ($rows) = ch_rows_and_parts_of(@_); return $rows; }

sub micros_of
{
	my ($ts) = @_;
	return psql_ok("SELECT (extract(epoch FROM timestamptz '$ts') * 1000000)::bigint");
}

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
	my $out = psql_ok("SELECT id || '|' || (extract(epoch FROM w) * 1000000)::bigint || '|' || v"
		  . " FROM $db.batch_rows(timestamptz '$e' - interval '1 day', $b)");
	return [ sort split /\n/, $out ];
}

sub same { my ($a, $b) = @_; return join("\n", @$a) eq join("\n", @$b); }

# 'old', 'new' or a description of what else the target is.
sub judge
{
	my ($sh, $old, $e) = @_;
	my $rows = ch_rows_of($sh);
	return 'unreadable' unless $rows;
	return 'old' if same($rows, $old);
	my $hi = micros_of($e);
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

# The reader: polls every target, appends "polls bad" counts and any bad
# window to $file.
sub reader
{
	my ($file) = @_;
	my ($polls, $bad, $down) = (0, 0, 0);
	my %bounds = map { $_ => micros_of($_) } @DAYS;
	my $last = time;
	while (1)
	{
		for my $sh (@SHAPES)
		{
			my $t0 = time;
			my ($rows, $uuid, $parts) = eval { ch_rows_and_parts_of($sh) };
			my $t1 = time;
			if (!$rows) { $down++; sleep 0.2; next }
			$polls++;
			my $keep = grep { /\|keep$/ } @$rows;
			my @issues;
			push @issues, "$keep kept rows" unless $keep == 4;
			for my $e (@DAYS)
			{
				my ($in) = split_window($rows, $bounds{$e} - 86_400_000_000, $bounds{$e});
				push @issues, "window $e is not one whole batch" unless defined whole_batch($in);
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

sub pg_up { my ($rc) = psql('SELECT 1', timeout => 5); return $rc == 0; }

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

sub coordinator_of
{
	my ($inv) = @_;
	my ($rc, $out) = psql("SELECT holder_pid FROM dpwin.lease WHERE holder_invocation = '$inv'", timeout => 10);
	return $rc == 0 && $out =~ /^\d+$/ ? $out : undef;
}

sub workers_of
{
	my ($inv) = @_;
	my ($rc, $out) = psql("SELECT c.worker_pid FROM dpwin.chunk c JOIN pg_stat_activity a ON a.pid = c.worker_pid"
		  . " AND a.backend_type = 'dpwin chunk worker' WHERE c.invocation_id = '$inv'", timeout => 10);
	return $rc == 0 ? grep { /^\d+$/ } split /\n/, $out : ();
}

sub caller_pid
{
	my ($app) = @_;
	my ($rc, $out) = psql("SELECT pid FROM pg_stat_activity WHERE application_name = '$app'", timeout => 10);
	return $rc == 0 && $out =~ /^\d+$/ ? $out : undef;
}

sub inv_state
{
	my ($inv) = @_;
	return psql_ok("SELECT coalesce((SELECT state FROM dpwin.invocation WHERE invocation_id = '$inv'), '')");
}

# ---- the faults -------------------------------------------------------------------

# Statements of a refresh that an endpoint fault may hit, by the text it
# contains; %s is the invocation's table prefix, %t the target.  The
# RENAME is the one that keeps the replaced table as the backup: after the
# EXCHANGE the generation's name holds it.
my @STATEMENTS = (
	"FROM system.databases WHERE name = 'DB'",
	'INSERT INTO `DB`.`%sstg_',
	'CREATE TABLE `DB`.`%sstg_',
	"' FROM `DB`.`%sstg_",
	'SELECT countIf(',
	'EXCHANGE TABLES `DB`.`%t` AND',
	'RENAME TABLE `DB`.`%sgen` TO',
	'DROP TABLE IF EXISTS `DB`.`%sstg_',
);

my @KINDS = qw(kill_coordinator kill_worker restart_pg restart_ch cancel terminate
  ep_error ep_lost ep_delay_kill takeover none);

sub invocation_prefix_of
{
	my ($sh, $inv) = @_;
	my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '${db}_$sh'");
	(my $hex = $inv) =~ s/-//g;
	return "_dpwin_${rid}_" . substr($hex, 0, 12) . '_';
}

sub statement_pattern
{
	my ($sh, $inv) = @_;
	my $p = $STATEMENTS[ int(rand(@STATEMENTS)) ];
	$p =~ s/DB/$db/g;
	$p =~ s/%s/invocation_prefix_of($sh, $inv)/e;
	$p =~ s/%t/tgt_$sh/g;
	return $p;
}

# Run one trial; returns its kind.
sub trial
{
	my ($typical) = @_;
	my $sh = $TRIAL_SHAPES[ int(rand(@TRIAL_SHAPES)) ];
	my $e = $DAYS[ int(rand(@DAYS)) ];
	my $kind = $KINDS[ int(rand(@KINDS)) ];
	my $route = "${db}_$sh";
	my $old = ch_rows_of($sh) // die "the target tgt_$sh cannot be read\n";
	my $inv = new_uuid();
	my $delay = rand($typical * 1.3);
	my $label = sprintf('trial %d: %s on %s window %s at %.2f s', $trial_no, $kind, $sh, substr($e, 0, 10), $delay);
	say_($label);
	my $app = "chaos_caller_$trial_no";

	if ($kind =~ /^ep_/)
	{
		my $pat = statement_pattern($sh, $inv);
		my %f = (pattern => $pat, count => 1);
		if ($kind eq 'ep_error') { %f = (%f, mode => 'error', code => (53, 159, 241, 497, 999)[ int(rand(5)) ]) }
		elsif ($kind eq 'ep_lost') { %f = (%f, mode => 'idle_close', ms => 0) }
		else { %f = (%f, mode => 'delay', ms => 200 + int(rand(2000))) }
		fault(%f);
		say_("  fault $f{mode} on \"$pat\"");
	}
	my $h = bg_psql("SELECT state FROM dpwin_refresh('$route', '$e', '$inv')", $app);
	my $t0 = time;
	sleep($delay);
	my $hit = 1;
	if ($kind eq 'kill_coordinator' || $kind eq 'ep_delay_kill')
	{
		my $pid = coordinator_of($inv);
		if ($pid) { kill 'KILL', $pid; } else { $hit = 0 }
	}
	elsif ($kind eq 'kill_worker')
	{
		my @w = workers_of($inv);
		if (@w) { kill 'KILL', $w[ int(rand(@w)) ]; } else { $hit = 0 }
	}
	elsif ($kind eq 'restart_pg') { sandbox('restart-pg') }
	elsif ($kind eq 'restart_ch') { sandbox('restart-ch') }
	elsif ($kind eq 'cancel' || $kind eq 'terminate')
	{
		my $pid = caller_pid($app);
		my $f = $kind eq 'cancel' ? 'pg_cancel_backend' : 'pg_terminate_backend';
		if ($pid) { psql("SELECT $f($pid)", timeout => 10) } else { $hit = 0 }
	}
	elsif ($kind eq 'takeover')
	{
		my $pid = coordinator_of($inv);
		if ($pid)
		{
			# a second refresh waits for the lease, then the first
			# coordinator is terminated and the second takes over
			my $h2 = do {
				local $ENV{PGOPTIONS} = '-c dpwin.lease_timeout=60s';
				bg_psql("SELECT state FROM dpwin_refresh('$route', '$e')", "${app}_2");
			};
			# its coordinator waits for the lease (an advisory lock)
			my $waits = wait_until(sub {
					my ($rc, $out) = psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dpwin coordinator'"
						  . " AND wait_event_type = 'Lock' AND wait_event = 'advisory'", timeout => 10);
					$rc == 0 && $out >= 1;
				}, 10);
			$stat{takeover_waited}++ if $waits;
			sleep(rand(0.3));
			psql("SELECT pg_terminate_backend($pid)", timeout => 10);
			my ($rc2, $out2, $err2) = bg_finish($h2);
			my ($st) = $err2 =~ /ERROR:\s+(?:[0-9A-Z]{5}: )?(.{0,120})/;
			say_("  the second refresh: " . ($rc2 == 0 ? $out2 : "error: " . ($st // $err2)));
			$stat{takeover_completed}++ if $rc2 == 0 && $out2 =~ /completed/;
		}
		else { $hit = 0 }
	}
	my ($rc, $out, $err) = bg_finish($h);
	$stat{missed}++ unless $hit;
	wait_pg() or die "PostgreSQL did not come back\n";
	ch_control('POST', '/faults/clear');
	release('');
	wait_until(sub { my ($c) = ch('SELECT 1'); $c == 200 }, 60) or die "ClickHouse did not come back\n";
	# a coordinator whose caller went away goes on alone: let it end
	wait_until(sub {
			my ($rc, $n) = psql("SELECT count(*) FROM pg_stat_activity"
				  . " WHERE backend_type IN ('dpwin coordinator', 'dpwin chunk worker')", timeout => 10);
			$rc == 0 && $n == 0;
		}, 120) or fail_('dpwin processes are still running two minutes after the refresh');
	my $state = inv_state($inv);
	$stat{"state $state"}++;
	say_(sprintf('  the refresh: %s; journal %s', $rc == 0 ? $out : 'error', $state || 'none'));

	my $j = judge($sh, $old, $e);
	$stat{"after the fault: $j"}++;
	fail_("after the fault the target is $j") unless $j =~ /^(old|new)$/;

	settle($sh);
	$j = judge($sh, $old, $e);
	fail_("after recovery the target is $j") unless $j =~ /^(old|new)$/;
	check_tables();
	check_journal($sh);
	return $kind;
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
	my %o = (seed => time() % 1_000_000, length => 120);
	while (@_)
	{
		my $a = shift;
		if ($a =~ /^--(seed|length|shapes)$/) { $o{$1} = shift }
		elsif ($a =~ /^--(seed|length|shapes)=(.*)$/) { $o{$1} = $2 }
		else { die "usage: test/chaos.sh [--seed N] [--length SECONDS] [--shapes day,month,flat]\n" }
	}
	die "--seed and --length are whole numbers\n" unless "$o{seed}$o{length}" =~ /^\d+$/;
	if (defined $o{shapes})
	{
		@TRIAL_SHAPES = split /,/, $o{shapes};
		die "--shapes names day, month or flat\n" if !@TRIAL_SHAPES || grep { !$ENGINE{$_} } @TRIAL_SHAPES;
	}
	$| = 1;
	say_("chaos: seed $o{seed}, length $o{length} s");
	srand($o{seed});
	my $start = time;
	setup();
	# how long a clean refresh takes here: the random moments span it
	my $t = time;
	psql_ok("SELECT state FROM dpwin_refresh('${db}_month', '$DAYS[0]')");
	my $typical = time - $t;
	say_(sprintf('chaos: a clean refresh takes %.2f s', $typical));
	my $dir = "/tmp/dpwin_chaos_$$";
	mkdir $dir;
	spawn(sub { reader("$dir/reader") });
	spawn(sub { writer("$dir/writer", $o{seed} + 1) });
	my $until = time + $o{length};
	my %kinds;
	my $died = 0;
	while (time < $until)
	{
		$trial_no++;
		push @trial_started, [ $trial_no, time ];
		set_query_ids(rand() < 0.5 ? 'visible' : 'hidden') if $trial_no % 5 == 1;
		my $kind = eval { trial($typical) };
		if (!defined $kind)
		{
			fail_("the trial died: $@");
			last if ++$died >= 3 || !wait_pg();
			next;
		}
		$died = 0;
		$kinds{$kind}++;
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
	say_("chaos: faults: " . join(', ', map { "$_ $kinds{$_}" } sort keys %kinds));
	say_("chaos: outcomes: " . join(', ', map { "$_ $stat{$_}" } sort keys %stat));
	say_("chaos: $_") for @failures;
	say_(sprintf('%d passed, %d failed', $n - $failed, $failed));
	return $failed ? 1 : 0;
}

1;
