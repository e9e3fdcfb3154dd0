#!/usr/bin/perl
#
# test/bench/bench.pl — the dpwin benchmark.  Run it through
# test/bench/run.sh; docs/benchmark.md explains every variant, parameter
# and column.
#
# Against the sandbox whose environment is loaded (PGHOST, DPWIN_CH_URL,
# ...), it generates a deterministic source table in PostgreSQL and, in
# ClickHouse, one pristine "base" target per shape (day-partitioned,
# month-partitioned, unpartitioned) and size (30 and 300 days).  Every
# measured variant runs on a fresh clone of a base (hard-linked parts, so
# every variant starts from the same physical target), in rounds that
# interleave all variants, timed by this script's own monotonic clock from
# the first call to the visible result.  Every resulting target is
# fingerprinted in ClickHouse (per day and window side: count, sum of
# cityHash64 of all columns, column sums) and compared with every other
# variant's result, with the base's rows outside the window and with
# PostgreSQL's own sums of the window's rows; a variant whose result
# differs is marked FAILED.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Spec;
use HTTP::Tiny;
use IPC::Run qw(run start finish timeout);
use JSON::PP qw(decode_json);
use MIME::Base64 qw(encode_base64);
use Encode qw(decode_utf8 encode_utf8);
use List::Util qw(max min first);
use POSIX qw(ceil floor strftime);
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC usleep);
use Time::Local qw(timegm);

$ENV{PGTZ} = 'UTC';
my $root = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
my $out = $ENV{BENCH_OUT} // "$root/test/bench/out";
make_path($out);

# ---- parameters ---------------------------------------------------------------

sub env_int
{
	my ($name, $default) = @_;
	my $v = $ENV{$name} // $default;
	die "$name must be a positive integer\n" unless $v =~ /^[0-9]+$/ && $v > 0;
	return $v + 0;
}

# The window's size: rows per day of the source, one dataset each
# (docs/benchmark.md, "The window's and the target's sizes"); the rounds
# take them in turn like the host modes.
my @rpds = split ' ', ($ENV{BENCH_ROWS_PER_DAY} // '100000');
for my $v (@rpds) { die "BENCH_ROWS_PER_DAY must be positive integers\n" unless $v =~ /^[0-9]+$/ && $v > 0; }
die "BENCH_ROWS_PER_DAY: no value\n" unless @rpds;
my $rpd = $rpds[0] + 0;
my $wdays = env_int('BENCH_WINDOW_DAYS', 7);
my $mem_wdays = env_int('BENCH_MEMORY_WINDOW_DAYS', 10 * $wdays);
my $skip_days = env_int('BENCH_SKIP_DAYS', 30);
# which day of the skip variant's lookback changes: a different one each
# round, or the newest (rows arrive and are corrected late)
my $skip_changed = $ENV{BENCH_SKIP_CHANGED} // 'rotate';
die "BENCH_SKIP_CHANGED: unknown choice $skip_changed (known: rotate newest)\n"
  unless $skip_changed =~ /^(rotate|newest)$/;
my @sizes = sort { $a <=> $b } split ' ', ($ENV{BENCH_SIZES} // '30 300');
my @shapes = split ' ', ($ENV{BENCH_SHAPES} // 'day month flat');
my @ends = split ' ', ($ENV{BENCH_ENDS} // '00:00 13:37');
my $par = env_int('BENCH_PARALLELISM', 2);
# the chunk interval of the window's routes, in days, and the chunks of the
# COPY and sink limits alike (the skip_unchanged and memory routes keep
# one-day chunks)
my $chunk_days = env_int('BENCH_CHUNK_DAYS', 1);
# dpwin's target: a fresh clone of the base in every round, as every peer's
# (a route's first refresh, or one after its target was replaced), or the
# table its route published last, refilled in place with the base's parts
# (a scheduled refresh after its first run)
my $target_mode = $ENV{BENCH_TARGET} // 'fresh';
die "BENCH_TARGET: unknown choice $target_mode (known: fresh scheduled)\n"
  unless $target_mode =~ /^(fresh|scheduled)$/;
my $rounds = env_int('BENCH_ROUNDS', 3);
my @kinds = qw(dpwin naive expert copy sink memory skip backfill);
my %only = map { $_ => 1 } split /,/, ($ENV{BENCH_ONLY} // join(',', @kinds));
# The backfill variants (docs/benchmark.md): CALL dpwin.backfill over this
# many windows of the lookback, ending at the source's last midnight, and
# the comparisons: one refresh of their span, and (unless 0) the same
# windows as single refreshes in one session.
my $bf_windows = env_int('BENCH_BACKFILL_WINDOWS', 10);
my $bf_days = $bf_windows * $wdays;
my $bf_singles = $ENV{BENCH_BACKFILL_SINGLES} // 1;
my $src_days = env_int('BENCH_SOURCE_DAYS',
	max(30, $mem_wdays, $skip_days, $wdays + 1, $only{backfill} ? $bf_days : 0));
# Where the processes run, and the round trip between them
# (docs/benchmark.md, "Two hosts and round trips").
my @hosts = split ' ', ($ENV{BENCH_HOSTS} // 'shared');
my @rtts = split ' ', ($ENV{BENCH_RTT_MS} // 'direct');
for my $h (@hosts) { die "BENCH_HOSTS: unknown mode $h (known: shared split)\n" unless $h =~ /^(shared|split)$/; }
for my $r (@rtts) { die "BENCH_RTT_MS: $r is not a number of ms or direct\n" unless $r =~ /^([0-9]+|direct)$/; }
my @modes = map { my $h = $_; map { "$h/$_" } @rtts } @hosts;

for my $k (keys %only) { die "BENCH_ONLY: unknown kind $k (known: @kinds)\n" unless grep { $_ eq $k } @kinds; }
for my $s (@shapes) { die "BENCH_SHAPES: unknown shape $s\n" unless $s =~ /^(day|month|flat)$/; }
for my $e (@ends) { die "BENCH_ENDS: $e is not HH:MM\n" unless $e =~ /^([01][0-9]|2[0-3]):[0-5][0-9]$/; }
for my $n (@sizes)
{
	die "BENCH_SIZES: $n is not a number of days\n" unless $n =~ /^[0-9]+$/;
	die "BENCH_SIZES: $n days cannot hold a $wdays-day window ending before the last day\n" if $n < $wdays + 1;
}
die "BENCH_SOURCE_DAYS must exceed the window by a day\n" if $src_days < $wdays + 1;

# A run with every default is the one whose CSV docs/benchmark.md quotes.
my $is_default = !grep { defined $ENV{$_} } qw(BENCH_ROWS_PER_DAY BENCH_WINDOW_DAYS BENCH_MEMORY_WINDOW_DAYS
  BENCH_SKIP_DAYS BENCH_SIZES BENCH_SHAPES BENCH_ENDS BENCH_PARALLELISM BENCH_ROUNDS BENCH_ONLY BENCH_SOURCE_DAYS
  BENCH_HOSTS BENCH_RTT_MS BENCH_SKIP_CHANGED BENCH_CHUNK_DAYS BENCH_TARGET BENCH_BACKFILL_WINDOWS
  BENCH_BACKFILL_SINGLES);
my $csv_path = $ENV{BENCH_CSV} // ($is_default ? "$root/docs/bench/results.csv" : undef);

my $start_epoch = timegm(0, 0, 0, 1, 0, 2026);    # 2026-01-01 00:00:00 UTC
my $end_epoch = $start_epoch + $src_days * 86400;  # the source's end: midnight
my ($tag, $pgs, $db);                              # the dataset's; set_density()

# The dataset of $rpd rows a day becomes the current one: its PostgreSQL
# schema and ClickHouse database (bench_r<rows>_d<days>).
sub set_density
{
	($rpd) = @_;
	$tag = "r${rpd}_d${src_days}";
	$pgs = "bench_$tag";
	$db = "bench_$tag";
}
set_density($rpd);

# A name of the current dataset's (a route, a window's key): with several
# window sizes in one run, each has its own.
sub dname { my ($n) = @_; return @rpds > 1 ? "${n}_r$rpd" : $n; }
my $server = 'sandbox_ch';
my $cols = 'id, w, amount, note, qty, flag';
my $ch_cols = "(id Int64, w Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)),"
  . " note Nullable(String), qty Nullable(Int32), flag Nullable(Bool))";
my %shape_ddl = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => "ORDER BY id",
);

require "$root/test/bench/report.pl";

sub on { return $only{ $_[0] }; }
sub logmsg { printf STDERR "bench: %s\n", join('', @_); }
sub now { return clock_gettime(CLOCK_MONOTONIC); }
sub ts { return strftime('%Y-%m-%d %H:%M:%S', gmtime($_[0])); }

sub timed
{
	my ($code) = @_;
	my $t0 = now();
	my @r = $code->();
	return (now() - $t0, @r);
}

# The unix ms span of a variant's timed part, when it does untimed work of
# its own (dropping and creating scratch tables): its statements are those
# that arrived within it.
my @span;

sub spanned
{
	my ($code) = @_;
	my $t0 = Time::HiRes::time() * 1000;
	my @r = timed($code);
	@span = ($t0, Time::HiRes::time() * 1000);
	return @r;
}

# ---- PostgreSQL and ClickHouse ------------------------------------------------------

sub psql
{
	my ($sql, %o) = @_;
	my ($o, $e) = ('', '');
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1');
	push @cmd, '-F', $o{sep} if $o{sep};
	run \@cmd, '<', \$sql, '>', \$o, '2>', \$e, timeout($o{timeout} // 7200)
	  or die "psql failed: $e\nSQL: " . substr($sql, 0, 500) . "\n";
	chomp $o;
	return $o;
}

# psql as a session already open runs statements: the session's own clock
# (clock_timestamp(), the machine's clock as Time::HiRes reads it) is read
# before the first and after the last, and only that span is the
# statements' time.  A scheduler's or a DBA's session is open when it
# calls dpwin_refresh(), as the peers' HTTP connection is kept alive;
# starting psql (through Debian's Perl wrapper), the backend's fork and the
# authentication are the client's, not the tool's, and cost 0.05-0.2 s a
# call on this machine.  Returns the command and the script for stdin; the
# clock's two readings end up on stderr, read by session_span().
sub session_script
{
	my ($sql) = @_;
	return "SELECT extract(epoch FROM clock_timestamp()) AS bench_t0 \\gset\n"
	  . "$sql;\n"
	  . "SELECT extract(epoch FROM clock_timestamp()) AS bench_t1 \\gset\n"
	  . "\\warn bench_span :bench_t0 :bench_t1\n";
}

sub session_span
{
	my ($err) = @_;
	my ($t0, $t1) = $err =~ /^bench_span (\S+) (\S+)$/m or die "no session clock in psql's output: $err\n";
	return ($t0, $t1);
}

# (seconds, stdout) of $sql in an open session.
sub psql_session_timed
{
	my ($sql) = @_;
	my ($o, $e) = ('', '');
	run [ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1' ], '<', \session_script($sql),
	  '>', \$o, '2>', \$e, timeout(7200)
	  or die "psql failed: $e\nSQL: " . substr($sql, 0, 500) . "\n";
	my ($t0, $t1) = session_span($e);
	chomp $o;
	# the statements the call caused are those within its session's span
	@span = ($t0 * 1000, $t1 * 1000);
	return ($t1 - $t0, $o);
}

sub uri_escape
{
	my ($s) = @_;
	$s =~ s/([^A-Za-z0-9\-_.~])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

# One keep-alive HTTP client per process (forked children make their own).
my %http;

sub http
{
	$http{$$} //= HTTP::Tiny->new(keep_alive => 1, timeout => 7200);
	return $http{$$};
}

# ch($sql, %o): the answer, without its last line break; dies on an error.
# params: more URL settings; body: the request body (INSERT data).
sub ch
{
	my ($sql, %o) = @_;
	# a long statement without data (the expert's ALTER of a thousand
	# partitions) goes as the body: a URL holds some 8 KB
	my $in_body = !defined $o{body} && length($sql) > 4000;
	my %p = (async_insert => 0, insert_deduplicate => 0, wait_end_of_query => 1,
		%{ $o{params} // {} }, ($in_body ? () : (query => $sql)));
	my $url = ($o{url} // $ENV{DPWIN_CH_URL}) . '/?' . join('&', map { "$_=" . uri_escape($p{$_}) } sort keys %p);
	my $auth = 'Basic ' . encode_base64("$ENV{DPWIN_CH_USER}:$ENV{DPWIN_CH_PASSWORD}", '');
	my $r = ($o{client} // http())->request('POST', $url,
		{ content => $in_body ? encode_utf8($sql) : $o{body} // '', headers => { Authorization => $auth } });
	die "ClickHouse failed ($r->{status}): $r->{content}\nSQL: " . substr($sql, 0, 500) . "\n"
	  unless $r->{success};
	return $r->{content} if $o{binary};
	my $c = decode_utf8($r->{content});
	chomp $c;
	return $c;
}

sub ch_lines { my $a = ch(@_); return grep { length } split /\n/, $a; }

sub ch_exists
{
	my ($t) = @_;
	return ch("SELECT count() FROM system.tables WHERE database = '$db' AND name = '$t'") == 1;
}

sub ch_drop { ch("DROP TABLE IF EXISTS $db.`$_` SYNC") for @_; }

# Wait until ClickHouse runs no merge and no mutation in the bench database.
sub settle
{
	for (1 .. 2400)
	{
		return if ch("SELECT (SELECT count() FROM system.merges WHERE database = '$db')"
			  . " + (SELECT count() FROM system.mutations WHERE database = '$db' AND NOT is_done)") == 0;
		usleep(100_000);
	}
	logmsg("merges did not settle");
}

# ClickHouse's view of the source; $port: PostgreSQL's, or the delay
# proxy's in front of it.
sub pg_source_fn
{
	my ($port) = @_;
	$port //= $ENV{PGPORT};
	return "postgresql('127.0.0.1:$port', '$ENV{PGDATABASE}', 'events', 'postgres', '', '$pgs')";
}

sub ch_window
{
	my ($lo, $hi) = @_;
	return "w >= toDateTime64('" . ts($lo) . "', 6, 'UTC') AND w < toDateTime64('" . ts($hi) . "', 6, 'UTC')";
}

# ---- peak memory of dpwin's processes -------------------------------------------------

# A child process polls the postmaster's children every 20 ms and keeps,
# for coordinators and chunk workers, the largest VmHWM (peak resident set,
# shared buffers the process touched included), RssAnon (private memory:
# palloc, libcurl, encode buffers) and RssShmem seen.
my $postmaster = do {
	open my $f, '<', "$ENV{DPWIN_PGDATA}/postmaster.pid" or die "no postmaster.pid: $!";
	my $l = <$f>;
	chomp $l;
	$l;
};

sub rss_sample
{
	my ($peak, $seen) = @_;
	open my $cf, '<', "/proc/$postmaster/task/$postmaster/children" or return;
	my @pids = split ' ', (<$cf> // '');
	close $cf;
	for my $p (@pids)
	{
		my $role = $seen->{$p};
		if (!defined $role)
		{
			open my $c, '<', "/proc/$p/cmdline" or next;
			my $cmd = <$c> // '';
			close $c;
			$role = $cmd =~ /dpwin coordinator/ ? 'coord' : $cmd =~ /dpwin chunk worker/ ? 'worker' : '';
			# a fresh child may not have its title yet
			$seen->{$p} = $role if $role || $cmd =~ /^postgres: /;
		}
		next unless $role;
		open my $s, '<', "/proc/$p/status" or next;
		while (my $l = <$s>)
		{
			next unless $l =~ /^(VmHWM|RssAnon|RssShmem):\s+(\d+)/;
			my $k = "${role}_" . { VmHWM => 'hwm', RssAnon => 'anon', RssShmem => 'shmem' }->{$1};
			$peak->{$k} = $2 if $2 > ($peak->{$k} // 0);
		}
		close $s;
	}
}

sub rss_start
{
	my $file = "$out/.rss.$$";
	unlink $file;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return { pid => $pid, file => $file } if $pid;
	my $parent = getppid();
	open STDOUT, '>', '/dev/null';
	open STDIN, '<', '/dev/null';
	my (%peak, %seen);
	my $stop = 0;
	local $SIG{TERM} = sub { $stop = 1 };
	while (!$stop && getppid() == $parent)
	{
		rss_sample(\%peak, \%seen);
		usleep(20_000);
	}
	open my $f, '>', $file or POSIX::_exit(1);
	print $f join(' ', map { "$_=$peak{$_}" } sort keys %peak), "\n";
	close $f;
	POSIX::_exit(0);
}

sub rss_stop
{
	my ($h) = @_;
	kill 'TERM', $h->{pid};
	waitpid($h->{pid}, 0);
	open my $f, '<', $h->{file} or return {};
	my %r = map { split /=/ } split ' ', (scalar(<$f>) // '');
	close $f;
	unlink $h->{file};
	$r{$_} = sprintf('%.1f', $r{$_} / 1024) for keys %r;    # kB -> MB
	return \%r;
}

# ---- hosts, round trips, CPU and statements ---------------------------------------------
#
# A mode is "HOSTS/RTT".  HOSTS split pins PostgreSQL (the postmaster and
# every process it has started; later ones inherit its affinity) to CPU 0
# and the endpoint (every thread) to CPU 1, as on two hosts; shared lets
# both use both CPUs.  RTT (ms) puts test/bench/netdelay between dpwin and
# the endpoint (a foreign server of its own), between the peers' and the
# limits' clients and the servers, and between ClickHouse's postgresql()
# and PostgreSQL; "direct" uses no proxy, as before these dimensions.

my $sandbox = $ENV{DPWIN_SANDBOX} // $ENV{DPWIN_SANDBOX_DIR};
my $ch_pid = do {
	open my $f, '<', "$sandbox/ch.pid" or die "no ch.pid: $!";
	my $l = <$f>;
	chomp $l;
	$l;
};
my $netdelay = $ENV{BENCH_NETDELAY} // "$out/netdelay";
my (@helpers, %net);
END { kill 'TERM', @helpers if @helpers; }

sub children
{
	my ($pid) = @_;
	open my $f, '<', "/proc/$pid/task/$pid/children" or return ();
	my @c = split ' ', (<$f> // '');
	return @c;
}

sub spawn_helper
{
	my ($stdout, @cmd) = @_;
	my $pid = fork() // die "fork: $!";
	if (!$pid)
	{
		open STDIN, '<', '/dev/null';
		open STDOUT, '>', $stdout or POSIX::_exit(126);
		exec(@cmd) or POSIX::_exit(127);
	}
	push @helpers, $pid;
	return $pid;
}

# A delay proxy in front of 127.0.0.1:$target: its port.
sub start_proxy
{
	my ($target, $rtt) = @_;
	my $pf = "$out/.port.$$." . scalar(@helpers);
	unlink $pf;
	spawn_helper('/dev/null', $netdelay, 'proxy', $target, $rtt, $pf);
	for (1 .. 500)
	{
		if (open my $f, '<', $pf)
		{
			my $p = <$f> // '';
			if ($p =~ /^([0-9]+)\n/) { unlink $pf; return $1; }
		}
		usleep(10_000);
	}
	die "netdelay did not start\n";
}

# The proxies of every round trip of the run, and a foreign server behind
# each ClickHouse proxy, mapped as the sandbox's own server is.
sub net_setup
{
	for my $r (@rtts)
	{
		if ($r eq 'direct')
		{
			$net{$r} = { url => $ENV{DPWIN_CH_URL}, pg_port => $ENV{PGPORT}, pg_host => $ENV{PGHOST}, server => $server };
			next;
		}
		my ($cp, $pp) = (start_proxy($ENV{DPWIN_CH_URL} =~ /:([0-9]+)$/, $r), start_proxy($ENV{PGPORT}, $r));
		my $srv = "bench_ch_rtt$r";
		psql("DROP SERVER IF EXISTS $srv CASCADE;
			CREATE SERVER $srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url 'http://127.0.0.1:$cp');
			CREATE USER MAPPING FOR CURRENT_USER SERVER $srv
				OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}')");
		$net{$r} = { url => "http://127.0.0.1:$cp", pg_port => $pp, pg_host => '127.0.0.1', server => $srv };
		logmsg("round trip $r ms: ClickHouse through port $cp, PostgreSQL through port $pp, foreign server $srv");
	}
}

my ($cur_hosts, $cur_net) = ('', 'direct');

sub pin
{
	my ($cpus, @pids) = @_;
	run([ 'taskset', '-a', '-c', '-p', $cpus, $_ ], '>', '/dev/null', '2>', '/dev/null') for @pids;
}

sub set_mode
{
	my ($mode) = @_;
	my ($h, $r) = split m{/}, $mode;
	if ($h ne $cur_hosts)
	{
		my ($pgc, $chc) = $h eq 'split' ? ('0', '1') : ('0-1', '0-1');
		pin($pgc, $postmaster, children($postmaster));
		pin($chc, $ch_pid);
		$cur_hosts = $h;
	}
	$cur_net = $r;
}

# The peers' and the limits' own HTTP client (a fresh connection for every
# variant: dpwin opens its own too) and statements.
my %peer_http;
sub peer_reset { delete $peer_http{$$}; }

sub ch_peer
{
	my ($sql, %o) = @_;
	$peer_http{$$} //= HTTP::Tiny->new(keep_alive => 1, timeout => 7200);
	return ch($sql, %o, url => $net{$cur_net}{url}, client => $peer_http{$$});
}

my $tck = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;

# utime + stime (+ the exited and waited-for children's) of $pid, in ticks.
sub stat_ticks
{
	my ($pid) = @_;
	open my $f, '<', "/proc/$pid/stat" or return 0;
	my $l = <$f> // '';
	$l =~ s/^.*\) //s;
	my @f = split ' ', $l;
	return ($f[11] // 0) + ($f[12] // 0) + ($f[13] // 0) + ($f[14] // 0);
}

# CPU ticks so far of PostgreSQL (the postmaster, its live children and,
# through the postmaster's cutime/cstime, every child it has reaped) and
# of the endpoint.
sub cpu_sample
{
	my $pg = stat_ticks($postmaster);
	$pg += stat_ticks($_) for children($postmaster);
	return [ $pg, stat_ticks($ch_pid) ];
}

# The endpoint's query log, each line stamped with the time it appeared
# (when the statement was answered) by `netdelay stamp`.
my $stamps = "$out/.stamps.$$";
my $stamps_fh;

sub stamps_start
{
	unlink $stamps;
	spawn_helper($stamps, $netdelay, 'stamp', "$sandbox/ch_queries.log");
	usleep(100_000);
	open $stamps_fh, '<', $stamps or die "$stamps: $!";
}
END { unlink $stamps if $stamps; }

my $stmt_dir = "$out/statements";

# The statements that arrived between $t0 and $t1 (unix ms): how many, and
# how many of them ran one after another (the most that do not overlap in
# time: each arrived after the previous one was answered; every one of
# them costs at least one round trip).  Writes them, the sequence marked,
# to $stmt_dir/$name.tsv.
sub statements
{
	my ($t0, $t1, $name) = @_;
	usleep(30_000);
	my @s;
	while (my $l = <$stamps_fh>)
	{
		chomp $l;
		my ($ans, $seq, $arr, $qid, $user, $status, $text) = split /\t/, $l, 7;
		# the log's arrival is in whole ms: $arr <= real arrival < $arr + 1
		next unless defined $text && $arr + 1 > $t0 && $arr + 1 <= $t1;
		push @s, { ans => $ans, arr => $arr, status => $status, text => $text };
	}
	seek($stamps_fh, 0, 1);
	my ($last, $crit) = (-1, 0);
	for my $x (sort { $a->{ans} <=> $b->{ans} } @s)
	{
		next unless $x->{arr} >= floor($last);
		$x->{seq} = ++$crit;
		$last = $x->{ans};
	}
	if (defined $name)
	{
		make_path($stmt_dir);
		(my $f = $name) =~ s/[^A-Za-z0-9_.-]+/_/g;
		if (open my $o, '>', "$stmt_dir/$f.tsv")
		{
			print $o "# arrival_ms answer_ms (from the variant's start) in_sequence status statement\n";
			printf $o "%d\t%.1f\t%s\t%s\t%s\n", $_->{arr} - $t0, $_->{ans} - $t0, $_->{seq} // '', $_->{status},
			  substr($_->{text}, 0, 300) for sort { $a->{arr} <=> $b->{arr} } @s;
			close $o;
		}
	}
	return (scalar @s, $crit);
}

# Runs one variant ($code returns its result hash or dies) and adds the
# CPU seconds of each side and the statements the endpoint received.
sub measured
{
	my ($name, $code) = @_;
	my $c0 = cpu_sample();
	my $t0 = Time::HiRes::time() * 1000;
	@span = ();
	my $r = $code->();
	my $t1 = Time::HiRes::time() * 1000;
	my $c1 = cpu_sample();
	($t0, $t1) = @span if @span;
	$r->{cpu_pg} = ($c1->[0] - $c0->[0]) / $tck;
	$r->{cpu_ch} = ($c1->[1] - $c0->[1]) / $tck;
	($r->{stmts}, $r->{crit}) = statements($t0, $t1, $name);
	return $r;
}

# ---- the dataset ----------------------------------------------------------------------

# bench_<tag>.events: $rpd rows a day spread evenly over each day from
# 2026-01-01, NULLs in every nullable column, 2.4 % identical duplicates.
sub pg_dataset
{
	my $sig = "v2 rows_per_day=$rpd days=$src_days";
	my $have = eval { psql("SELECT sig FROM $pgs.meta") } // '';
	if ($have eq $sig)
	{
		logmsg("PostgreSQL dataset $pgs is there");
		return;
	}
	logmsg("generating $pgs.events: $src_days days x $rpd rows (+ duplicates, NULLs)");
	my ($t) = timed(sub {
		psql("DROP SCHEMA IF EXISTS $pgs CASCADE; CREATE SCHEMA $pgs;
			CREATE TABLE $pgs.meta (sig text);
			CREATE TABLE $pgs.events (id bigint NOT NULL, w timestamptz, amount numeric(18,2),
				note text, qty integer, flag boolean);
			INSERT INTO $pgs.events
			SELECT g,
				CASE WHEN g % 37 = 5 THEN NULL
					 ELSE timestamptz '" . ts($start_epoch) . "+00' + interval '1 day' * (g / $rpd)
						  + interval '1 microsecond' * ((g % $rpd) * (86400000000 / $rpd)) END,
				CASE WHEN g % 43 = 1 THEN NULL ELSE ((g * 7919) % 10000000000) / 100.0 END,
				CASE WHEN g % 47 = 2 THEN NULL ELSE left(md5(g::text), 30) || '-' || lpad(g::text, 9, '0') END,
				CASE WHEN g % 53 = 3 THEN NULL ELSE ((g * 31) % 2000000)::integer - 1000000 END,
				CASE WHEN g % 59 = 4 THEN NULL ELSE g % 3 = 0 END
			  FROM generate_series(0, ${src_days}::bigint * $rpd - 1) g;
			INSERT INTO $pgs.events SELECT * FROM $pgs.events WHERE id % 41 = 6;
			CREATE INDEX events_w ON $pgs.events (w);
			VACUUM ANALYZE $pgs.events;
			INSERT INTO $pgs.meta VALUES ('$sig');");
	});
	logmsg(sprintf("generated in %.1f s", $t));
}

sub base_name { my ($shape, $n) = @_; return "base_${shape}_$n"; }

# The base target of a shape and size: the last $n days of the source
# (shifted copies of it, with new ids, before its first day when $n is
# larger), NULL-window rows in proportion, then merged to one part per
# partition.  Never modified afterwards: variants run on clones.
sub ch_base
{
	my ($shape, $n) = @_;
	my $b = base_name($shape, $n);
	my $sig = "v2 $tag shape=$shape days=$n";
	my $have = ch("SELECT any(sig) FROM $db.meta WHERE name = '$b'");
	return if $have eq $sig && ch_exists($b);
	logmsg("loading $db.$b");
	ch_drop($b);
	ch("CREATE TABLE $db.$b $ch_cols ENGINE = MergeTree $shape_ddl{$shape}");
	my $end = "toDateTime64('" . ts($end_epoch) . "', 6, 'UTC')";
	for my $k (0 .. ceil($n / $src_days) - 1)
	{
		my $shift = $k * $src_days;
		ch("INSERT INTO $db.$b SELECT id + $k * 1000000000000, w - toIntervalDay($shift), amount, note, qty, flag"
			  . " FROM $db.src WHERE (w - toIntervalDay($shift) >= $end - toIntervalDay($n)"
			  . " OR (w IS NULL AND intHash32(id) % $src_days < least($src_days, $n - $shift)))",
			params => { max_partitions_per_insert_block => 0 });
	}
	ch("OPTIMIZE TABLE $db.$b FINAL");
	settle();
	ch("ALTER TABLE $db.meta DELETE WHERE name = '$b'", params => { mutations_sync => 2 });
	ch("INSERT INTO $db.meta VALUES ('$b', '$sig')");
}

sub ch_dataset
{
	ch("CREATE DATABASE IF NOT EXISTS $db ENGINE = Atomic");
	ch("CREATE TABLE IF NOT EXISTS $db.meta (name String, sig String) ENGINE = MergeTree ORDER BY name");
	my $srcsig = "v2 $tag";
	if (ch("SELECT any(sig) FROM $db.meta WHERE name = 'src'") ne $srcsig || !ch_exists('src'))
	{
		logmsg("copying the source into $db.src");
		ch_drop('src');
		ch("CREATE TABLE $db.src $ch_cols ENGINE = MergeTree ORDER BY id");
		ch("INSERT INTO $db.src SELECT $cols FROM " . pg_source_fn());
		ch("ALTER TABLE $db.meta DELETE WHERE name = 'src'", params => { mutations_sync => 2 });
		ch("INSERT INTO $db.meta VALUES ('src', '$srcsig')");
	}
	# every shape and size for the variants on targets and the sinks, the
	# largest day-partitioned one alone for the others
	my $every = grep { on($_) } qw(dpwin naive expert sink);
	my @need = $every ? map { my $n = $_; map { [ $_, $n ] } @shapes } @sizes : ();
	push @need, [ 'day', max(@sizes) ] if (on('memory') || on('skip') || on('backfill')) && !($every && grep { $_ eq 'day' } @shapes);
	my ($t) = timed(sub { ch_base(@$_) for @need; });
	logmsg(sprintf("ClickHouse bases ready in %.1f s", $t));
}

# A fresh target $t: a clone of base $b by hard links, so every variant
# starts from the same parts (one per partition) and nothing is copied.
sub clone_base
{
	my ($b, $t) = @_;
	ch_drop($t);
	ch("CREATE TABLE $db.$t AS $db.$b");
	attach_base($b, $t);
}

# The base's partitions attached to $t, by hard links.
sub attach_base
{
	my ($b, $t) = @_;
	my @ids = ch_lines("SELECT DISTINCT partition_id FROM system.parts"
		  . " WHERE database = '$db' AND table = '$b' AND active ORDER BY partition_id");
	while (my @batch = splice(@ids, 0, 100))
	{
		ch("ALTER TABLE $db.$t " . join(', ', map { "ATTACH PARTITION ID '$_' FROM $db.$b" } @batch));
	}
}

# The target of a scheduled refresh (BENCH_TARGET=scheduled): the table the
# route's last refresh published, its parts since merged into the base's.
# It is refilled in place (TRUNCATE, then the base's partitions by hard
# links), so that it keeps the UUID of that publication and a refresh finds
# the target its route published, as every run of a scheduled job after its
# first does; it then skips the EXCHANGE probe (docs/design.md, "The
# conversation with ClickHouse"). The first round makes the table with one
# refresh that is not measured.
sub refill_base
{
	my ($b, $t, $route, $hi) = @_;
	if (!(ch_lines("SELECT count() FROM system.tables WHERE database = '$db' AND name = '$t'"))[0])
	{
		clone_base($b, $t);
		settle();
		v_dpwin($route, $hi);
		drop_leftovers();
	}
	ch("TRUNCATE TABLE $db.$t");
	attach_base($b, $t);
}

# Drop what runs leave behind: dpwin's backups and any stray table of a
# failed run, peers' old generations, sinks.
sub drop_leftovers
{
	ch_drop(ch_lines("SELECT name FROM system.tables WHERE database = '$db'"
		  . " AND (startsWith(name, '_dpwin_') OR startsWith(name, 'gen_') OR startsWith(name, 'sink_'))"));
}

# ---- fingerprints and checks -------------------------------------------------------------

# Per UTC day and window side (1 inside, 0 outside, \N for a NULL window
# value): count, sum of cityHash64 of all columns, and column sums.
sub fingerprint
{
	my ($from, $lo, $hi, $where) = @_;
	return ch("SELECT toDate(w) AS d, " . ch_window($lo, $hi) . " AS inw, count(),"
		  . " sum(cityHash64(tuple(id, w, amount, note, qty, flag))), sum(id), sum(toInt64(amount * 100)),"
		  . " sum(qty), countIf(flag), sum(length(note)) FROM $from" . ($where ? " WHERE $where" : '')
		  . " GROUP BY d, inw ORDER BY d, inw FORMAT TSV");
}

# PostgreSQL's own sums of the window's rows, per UTC day, in the
# fingerprint's column order without the hash.
my %pg_ref;

sub pg_window_ref
{
	my ($table, $lo, $hi) = @_;
	my $k = "$pgs $table $lo $hi";
	return $pg_ref{$k} if !defined $_[3] && exists $pg_ref{$k};
	my %r = map { my @f = split /\t/; (shift(@f) => join("\t", @f)) } split /\n/,
	  psql("SELECT to_char(w, 'YYYY-MM-DD'), count(*), sum(id), coalesce(sum((amount * 100)::bigint), 0),"
		  . " coalesce(sum(qty), 0), count(*) FILTER (WHERE flag), coalesce(sum(octet_length(note)), 0)"
		  . " FROM $pgs.$table WHERE w >= '" . ts($lo) . "+00' AND w < '" . ts($hi) . "+00' GROUP BY 1 ORDER BY 1",
		sep => "\t");
	return $pg_ref{$k} = \%r;
}

my %base_ref;

sub base_outside_ref
{
	my ($b, $lo, $hi) = @_;
	my $k = "$db $b $lo $hi";
	$base_ref{$k} //= join("\n", grep { (split /\t/)[1] ne '1' } split /\n/, fingerprint("$db.$b", $lo, $hi));
	return $base_ref{$k};
}

# The window's rows as ClickHouse reads them from PostgreSQL through the
# postgresql() table function: the expected inside of every result.
my %source_ref;

sub source_window_ref
{
	my ($table, $lo, $hi, $fresh) = @_;
	my $k = "$pgs $table $lo $hi";
	return $source_ref{$k} if !$fresh && exists $source_ref{$k};
	(my $fn = pg_source_fn()) =~ s/'events'/'$table'/;
	return $source_ref{$k} = join("\n", grep { (split /\t/)[1] eq '1' } split /\n/,
		fingerprint($fn, $lo, $hi, ch_window($lo, $hi)));
}

# 'ok' or 'FAILED: why'.  The result's fingerprint must be the base's rows
# outside the window plus the source's rows inside it, both as ClickHouse
# fingerprints them (so every variant's result is compared with the same
# multiset), and the window's rows must have the sums PostgreSQL computes
# itself.
sub check_result
{
	my ($fp, $inside, $pgref, $outside) = @_;
	my (@in, @rest);
	for my $l (split /\n/, $fp)
	{
		my @f = split /\t/, $l;
		if ($f[1] eq '1') { push @in, $l; }
		else { push @rest, $l; }
	}
	return 'FAILED: rows outside the window differ from the base target' if join("\n", @rest) ne $outside;
	my %seen;
	for my $l (@in)
	{
		my @f = split /\t/, $l;
		my $pg = $pgref->{ $f[0] } // '';
		my $mine = join("\t", @f[ 2, 4 .. 8 ]);
		return "FAILED: window day $f[0] has ($mine), PostgreSQL ($pg)" if $mine ne $pg;
		$seen{ $f[0] } = 1;
	}
	for my $d (keys %$pgref) { return "FAILED: window day $d is missing" unless $seen{$d}; }
	return join("\n", @in) eq $inside ? 'ok' : "FAILED: the window's rows differ from the source's";
}

# ---- routes ------------------------------------------------------------------------------

sub route
{
	my ($name, $table, $lookback, %o) = @_;
	my $p = $o{par} // $par;
	my $src = $o{source} // 'events';
	my $srv = $o{server} // $server;
	my $c = $o{chunk_days} // 1;
	psql("SELECT dpwin.drop_route('$name') FROM dpwin.route WHERE route_name = '$name';
		SELECT dpwin.create_route('$name', '$pgs.$src', 'w', '$srv', '$db', '$table',
			interval '$lookback days', interval '$c days', parallelism => $p)");
}

sub have_skip_option
{
	return psql("SELECT count(*) FROM pg_attribute WHERE attrelid = 'dpwin.routes'::regclass"
		  . " AND attname = 'skip_unchanged' AND NOT attisdropped") == 1;
}

# ---- variants ------------------------------------------------------------------------------
#
# Each returns a hash: wall (the clock), rows, bytes, phases (stage, build,
# verify, publish; other = wall - their sum), mem, cloned, and leaves the
# result for the caller to check.

# What each dpwin call's psql spent outside its session (starting, connecting):
# reported as the meta line client_start_ms (median, min-max).
my @client_start;

sub v_dpwin
{
	my ($routename, $hi) = @_;
	my $rss = rss_start();
	my ($outer, $wall, $json) = eval { timed(sub { psql_session_timed("SELECT details->'evidence' FROM dpwin_refresh('$routename', '" . ts($hi) . "+00')") }) };
	push @client_start, $outer - $wall if defined $wall;
	my $err = $@;
	my $mem = rss_stop($rss);
	die $err if $err;
	my $ev = decode_json($json);
	my $ph = $ev->{phases};
	my $part = $ev->{partitions};
	return {
		wall => $wall, rows => $ev->{source_rows}, bytes => $ev->{encoded_bytes},
		stage => $ph->{stage_seconds}, build => $ph->{build_seconds},
		verify => $ph->{verify_seconds}, publish => $ph->{publish_seconds}, mem => $mem,
		cloned => $part && $part->{cloning} ? $part->{cloned_partitions} : '',
	};
}

# The phases, rows and bytes of several refreshes' evidence (JSON, one a
# line, as dpwin_refresh's details->'evidence'), summed.
sub evidence_sum
{
	my (@json) = @_;
	my %r = (rows => 0, bytes => 0, stage => 0, build => 0, verify => 0, publish => 0, windows => 0);
	for my $j (grep { length } @json)
	{
		my $ev = decode_json($j);
		my $ph = $ev->{phases} // {};
		$r{rows} += $ev->{source_rows} // 0;
		$r{bytes} += $ev->{encoded_bytes} // 0;
		$r{$_} += $ph->{"${_}_seconds"} // 0 for qw(stage build verify publish);
		$r{windows}++;
	}
	return \%r;
}

# CALL dpwin.backfill(route, lo, hi) in an open session (the session's
# clock, as v_dpwin's), then the evidence of the backfill's windows, read
# after the timed part; dies unless the backfill completed every window.
sub v_backfill
{
	my ($routename, $lo, $hi, $windows) = @_;
	my $rss = rss_start();
	my ($wall) = eval { psql_session_timed("CALL dpwin.backfill('$routename', '" . ts($lo) . "+00', '" . ts($hi) . "+00')") };
	my $err = $@;
	my $mem = rss_stop($rss);
	die $err if $err;
	my ($state, $done, $total) = split /\|/, psql("SELECT state, windows_done, windows_total FROM dpwin.backfills"
		  . " WHERE route_name = '$routename' ORDER BY backfill_id DESC LIMIT 1");
	die "the backfill is $state with $done of $total windows\n" unless $state eq 'completed' && $done == $windows && $total == $windows;
	my $ev = evidence_sum(split /\n/, psql("SELECT e.metrics FROM dpwin.evidence e JOIN dpwin.invocation i USING (invocation_id)"
		  . " WHERE i.backfill_id = (SELECT max(b.backfill_id) FROM dpwin.backfill b JOIN dpwin.route r USING (route_id)"
		  . " WHERE r.route_name = '$routename')"));
	die "the backfill has evidence of $ev->{windows} windows, not $windows\n" unless $ev->{windows} == $windows;
	return { wall => $wall, mem => $mem, %$ev };
}

# What a DBA scripts without dpwin.backfill: the same windows, newest
# first, as separate dpwin_refresh calls in one open session.
sub v_singles
{
	my ($routename, @his) = @_;
	my $rss = rss_start();
	my ($wall, $out) = eval {
		psql_session_timed(join(";\n", map { "SELECT details->'evidence' FROM dpwin_refresh('$routename', '" . ts($_) . "+00')" } @his));
	};
	my $err = $@;
	my $mem = rss_stop($rss);
	die $err if $err;
	my $ev = evidence_sum(split /\n/, $out);
	die "the single refreshes gave evidence of $ev->{windows} windows, not " . scalar(@his) . "\n" unless $ev->{windows} == @his;
	return { wall => $wall, mem => $mem, %$ev };
}

# The refresh as a ClickHouse user writes it without dpwin: copy every kept
# row into a new table, pull the window through postgresql(), EXCHANGE.
sub v_naive
{
	my ($t, $lo, $hi) = @_;
	my $g = "gen_$t";
	ch_drop($g);
	peer_reset();
	my %ph;
	my ($wall) = spanned(sub {
		($ph{other}) = timed(sub { ch_peer("CREATE TABLE $db.$g AS $db.$t") });
		($ph{stage}) = timed(sub { ch_peer("INSERT INTO $db.$g SELECT $cols FROM " . pg_source_fn($net{$cur_net}{pg_port}) . " WHERE " . ch_window($lo, $hi)) });
		($ph{build}) = timed(sub {
			ch_peer("INSERT INTO $db.$g SELECT $cols FROM $db.$t WHERE NOT (" . ch_window($lo, $hi) . ") OR w IS NULL",
				params => { max_partitions_per_insert_block => 0 });
		});
		($ph{publish}) = timed(sub { ch_peer("EXCHANGE TABLES $db.$t AND $db.$g") });
	});
	return { wall => $wall, %ph, verify => 0 };
}

# Where a partition of the day or month shape lies: [start, end) epochs.
sub partition_range
{
	my ($shape, $value) = @_;
	# the partition of NULL window values: printed as NULL, \N or the
	# engine's pretty NULL sign, depending on the version
	return () if $value !~ /^[0-9]+$/ && $value =~ /^(NULL|\\N|\x{1d3a}\x{1d41}\x{1d38}\x{1d38})$/;
	if ($shape eq 'day' && $value =~ /^(\d{4})(\d\d)(\d\d)$/)
	{
		my $s = timegm(0, 0, 0, $3, $2 - 1, $1);
		return ($s, $s + 86400);
	}
	if ($shape eq 'month' && $value =~ /^(\d{4})(\d\d)$/)
	{
		my ($y, $m) = ($1, $2);
		return (timegm(0, 0, 0, 1, $m - 1, $y), $m == 12 ? timegm(0, 0, 0, 1, 0, $y + 1) : timegm(0, 0, 0, 1, $m, $y));
	}
	die "unexpected partition $value of shape $shape\n";
}

# The refresh as a ClickHouse expert writes it: clone every partition not
# wholly inside the window (the whole table when it has no partition key)
# by ATTACH PARTITION ... FROM, remove the window's rows from the clones of
# partitions that straddle a window bound with a lightweight DELETE, pull
# the window through postgresql(), EXCHANGE.  The DELETE runs in a scratch
# table holding only the straddling partitions, whose clean parts are then
# attached: a lightweight DELETE costs time for every part of its table
# (IN PARTITION included), about 0.13 s a part here.
sub v_expert
{
	my ($shape, $t, $lo, $hi) = @_;
	my ($g, $x) = ("gen_$t", "gen_${t}_x");
	ch_drop($g, $x);
	peer_reset();
	my %ph = (other => 0, build => 0);
	# one ALTER for all the partitions, as long as it stays under the
	# server's max_query_size (256 KiB): 2,000 and more of them at once
	my $attach = sub {
		my ($into, $from, @ids) = @_;
		while (my @batch = splice(@ids, 0, 2000))
		{
			ch_peer("ALTER TABLE $db.$into " . join(', ', map { "ATTACH PARTITION ID '$_' FROM $db.$from" } @batch));
		}
	};
	my ($wall) = spanned(sub {
		($ph{other}) = timed(sub { ch_peer("CREATE TABLE $db.$g AS $db.$t") });
		($ph{build}) = timed(sub {
			my (@keep, @straddle);
			for my $l (grep { length } split /\n/, ch_peer("SELECT partition_id, partition FROM system.parts WHERE database = '$db'"
					  . " AND table = '$t' AND active GROUP BY partition_id, partition"))
			{
				my ($id, $value) = split /\t/, $l;
				my ($a, $b) = $shape eq 'flat' ? ($lo - 1, $hi + 1) : partition_range($shape, $value);
				if (!defined $a || $b <= $lo || $a >= $hi) { push @keep, $id; }
				elsif ($a < $lo || $b > $hi) { push @straddle, $id; }
			}
			$attach->($g, $t, @keep);
			if ($shape eq 'flat')
			{
				$attach->($g, $t, @straddle);
				ch_peer("DELETE FROM $db.$g WHERE " . ch_window($lo, $hi));
			}
			elsif (@straddle)
			{
				ch_peer("CREATE TABLE $db.$x AS $db.$t");
				$attach->($x, $t, @straddle);
				ch_peer("DELETE FROM $db.$x WHERE " . ch_window($lo, $hi));
				$attach->($g, $x, @straddle);
			}
		});
		($ph{stage}) = timed(sub { ch_peer("INSERT INTO $db.$g SELECT $cols FROM " . pg_source_fn($net{$cur_net}{pg_port}) . " WHERE " . ch_window($lo, $hi)) });
		($ph{publish}) = timed(sub { ch_peer("EXCHANGE TABLES $db.$t AND $db.$g") });
	});
	ch_drop($x);
	return { wall => $wall, %ph, verify => 0 };
}

# The chunks dpwin reads for the $days days before $hi: [lo, hi) epochs,
# $chunk_days long from the first, the last one shorter when they do not
# divide the days, as dpwin plans them.
sub chunks_of
{
	my ($hi, $days) = @_;
	my $lo = $hi - $days * 86400;
	my $step = $chunk_days * 86400;
	return map { [ $lo + $_ * $step, min($lo + ($_ + 1) * $step, $hi) ] } 0 .. int(($days + $chunk_days - 1) / $chunk_days) - 1;
}

sub copy_sql
{
	my ($lo, $hi) = @_;
	return "COPY (SELECT $cols FROM $pgs.events WHERE w >= '" . ts($lo) . "+00' AND w < '" . ts($hi)
	  . "+00') TO STDOUT (FORMAT binary)";
}

# $n psql processes, chunk i on process i mod $n, each COPY's binary output
# counted by wc; returns the seconds from the first session's first COPY to
# the last one's end (session clocks, see session_script) and the bytes.
sub copy_streams
{
	my ($n, @chunks) = @_;
	my (@h, @bytes, @err);
	for my $k (0 .. $n - 1)
	{
		my @mine = map { $chunks[$_] } grep { $_ % $n == $k } 0 .. $#chunks;
		next unless @mine;
		my @cmd = ('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $net{$cur_net}{pg_host}, '-p', $net{$cur_net}{pg_port});
		my $script = session_script(join(";\n", map { copy_sql(@$_) } @mine));
		$bytes[$k] = '';
		$err[$k] = '';
		push @h, start(\@cmd, '<', \$script, '|', [ 'wc', '-c' ], '>', \$bytes[$k], '2>', \$err[$k]);
	}
	for my $k (0 .. $#h) { finish($h[$k]) or die "COPY failed: $err[$k]\n"; }
	# from the first stream's first statement to the last one's end
	my ($t0, $t1);
	for my $e (grep { length } @err)
	{
		my ($a, $b) = session_span($e);
		$t0 = $a if !defined $t0 || $a < $t0;
		$t1 = $b if !defined $t1 || $b > $t1;
	}
	my $sum = 0;
	$sum += $_ for grep { defined && length } @bytes;
	return ($t1 - $t0, $sum);
}

# The source limit: the same chunks as COPY ... (FORMAT binary) out of
# PostgreSQL, one stream ("serial") or $par streams ("parallel").
sub v_copy
{
	my ($n, $lo, $hi) = @_;
	my @chunks = $n == 1 ? ([ $lo, $hi ]) : chunks_of($hi, ($hi - $lo) / 86400);
	my ($wall, $bytes) = copy_streams($n, @chunks);
	return { wall => $wall, stage => $wall, build => 0, verify => 0, publish => 0, bytes => $bytes, copies => scalar @chunks };
}

# The window's rows as RowBinary, one file per chunk, written by ClickHouse
# from the smallest base (the bytes dpwin sends, checked by their size).
my %rowbinary;

sub rowbinary_files
{
	my ($hi) = @_;
	return $rowbinary{"$db $hi"} if $rowbinary{"$db $hi"};
	my $b = base_name('flat', $sizes[0]);
	$b = base_name($shapes[0], $sizes[0]) unless ch_exists($b);
	my @f;
	for my $c (chunks_of($hi, $wdays))
	{
		my $data = ch("SELECT $cols FROM $db.$b WHERE " . ch_window(@$c) . " ORDER BY w FORMAT RowBinary", binary => 1);
		push @f, $data;
	}
	return $rowbinary{"$db $hi"} = \@f;
}

# The sink limit: the window's pre-encoded RowBinary inserted into empty
# tables of the target's shape, as one INSERT ("serial") or one INSERT per
# chunk into a table per chunk from $par processes ("parallel").
sub v_sink
{
	my ($n, $shape, $hi) = @_;
	my $files = rowbinary_files($hi);
	my @bodies = $n == 1 ? (join('', @$files)) : @$files;
	my $b = base_name($shape, $sizes[0]);
	my @tables = map { "sink_$_" } 0 .. $#bodies;
	ch_drop(@tables);
	ch("CREATE TABLE $db.$_ AS $db.$b") for @tables;
	my $insert = sub {
		my ($k) = @_;
		ch_peer("INSERT INTO $db.$tables[$k] ($cols) FORMAT RowBinary", body => $bodies[$k],
			params => { max_partitions_per_insert_block => 0 });
	};
	peer_reset();
	my ($wall) = spanned(sub {
		if ($n == 1) { $insert->(0); return; }
		my @pids;
		for my $w (0 .. $n - 1)
		{
			my $pid = fork() // die "fork: $!";
			if (!$pid)
			{
				@helpers = ();
				my $ok = eval { $insert->($_) for grep { $_ % $n == $w } 0 .. $#bodies; 1 };
				print STDERR $@ unless $ok;
				POSIX::_exit($ok ? 0 : 1);
			}
			push @pids, $pid;
		}
		for (@pids) { waitpid($_, 0); die "a sink insert failed\n" if $?; }
	});
	my $bytes = 0;
	$bytes += length for @bodies;
	return { wall => $wall, stage => $wall, build => 0, verify => 0, publish => 0, bytes => $bytes };
}

# ---- one round ---------------------------------------------------------------------------

my @runs;
my %window_rows;

# Every run is also appended to $out/results.partial.csv as it ends: a
# results file without medians, which `perl test/bench/report.pl` reads,
# for a run stopped before its end.
sub partial_csv
{
	my (%f) = @_;
	open my $f, '>>', "$out/results.partial.csv" or return;
	print $f csv_row(%f);
	close $f;
}

my %copy_payload;

sub record
{
	my ($r, %k) = @_;
	$r = { %$r, %k };
	for my $p (qw(stage build verify publish))
	{
		$r->{$p} //= 0;
	}
	$r->{other} //= $r->{wall} - $r->{stage} - $r->{build} - $r->{verify} - $r->{publish} if defined $r->{wall};
	push @runs, $r;
	partial_csv(run_fields('run', $r));
	logmsg(sprintf("round %d %-13s %-5s %4s %-5s %-14s %7s s  cpu pg %5s ch %5s  statements %3s (%3s in sequence)  %s",
			$r->{round}, $r->{mode}, $r->{end}, $r->{days} // '', $r->{shape} // '', $r->{variant},
			defined $r->{wall} ? sprintf('%.3f', $r->{wall}) : '-', $r->{cpu_pg} // '', $r->{cpu_ch} // '',
			$r->{stmts} // '', $r->{crit} // '', $r->{check}));
	return $r;
}

# Run one variant on a fresh clone of its base and check its result.
sub target_variant
{
	my ($round, $end, $n, $shape, $variant) = @_;
	my ($lo, $hi) = ($end->{hi} - $wdays * 86400, $end->{hi});
	my $b = base_name($shape, $n);
	my %k = (round => $round, end => $end->{label}, days => $n, shape => $shape, variant => $variant, par => $par, mode_keys());
	# A scheduled refresh's target and route are its host mode's own: a
	# route made again for another mode's server forgets its publications.
	my $scheduled = $variant eq 'dpwin' && $target_mode eq 'scheduled';
	my $t = "t_${shape}_$n";
	my $route = dname("b_${shape}_$n");
	$t = $route = "s_${shape}_${n}_$k{mode}" =~ s{[/ ]}{_}gr if $scheduled;
	my $name = "$k{mode} $end->{label} ${shape}_$n $variant r$round";
	drop_leftovers();
	route_for_net($route, $t) if $variant eq 'dpwin';
	if ($scheduled) { refill_base($b, $t, $route, $hi); }
	else { clone_base($b, $t); }
	settle();
	my $r = eval {
		measured($name, sub {
			$variant eq 'dpwin' ? v_dpwin($route, $hi)
			  : $variant eq 'naive' ? v_naive($t, $lo, $hi)
			  : v_expert($shape, $t, $lo, $hi);
		});
	};
	if (!$r)
	{
		logmsg("$variant on $t failed: $@");
		return record({}, %k, check => 'FAILED: ' . (split /\n/, $@)[0]);
	}
	$r->{rows} //= $window_rows{ dname($end->{label}) };
	my $fp = fingerprint("$db.$t", $lo, $hi);
	$r->{check} = check_result($fp, source_window_ref('events', $lo, $hi), pg_window_ref('events', $lo, $hi),
		base_outside_ref($b, $lo, $hi));
	drop_leftovers();
	record($r, %k);
	return unless $variant eq 'dpwin' && ($ENV{BENCH_AGAIN} // 1);

	# The same refresh again, on the target dpwin has just published: what
	# a scheduled job meets from its second run on (a window bound inside a
	# partition leaves lightweight-deleted rows there).
	settle();
	my $again = eval { measured("$name again", sub { v_dpwin($route, $hi) }) };
	return record({}, %k, variant => 'dpwin again', check => 'FAILED: ' . (split /\n/, $@)[0]) if !$again;
	$again->{rows} //= $window_rows{ dname($end->{label}) };
	$again->{check} = check_result(fingerprint("$db.$t", $lo, $hi), source_window_ref('events', $lo, $hi),
		pg_window_ref('events', $lo, $hi), base_outside_ref($b, $lo, $hi));
	drop_leftovers();
	return record($again, %k, variant => 'dpwin again');
}

sub limit_variants
{
	my ($round, $end) = @_;
	my ($lo, $hi) = ($end->{hi} - $wdays * 86400, $end->{hi});
	my @items;
	if (on('copy'))
	{
		push @items, [ 'copy serial', undef, sub { v_copy(1, $lo, $hi) } ], [ 'copy parallel', undef, sub { v_copy($par, $lo, $hi) } ];
	}
	if (on('sink'))
	{
		for my $s (@shapes)
		{
			push @items, [ 'sink serial', $s, sub { v_sink(1, $s, $hi) } ], [ 'sink parallel', $s, sub { v_sink($par, $s, $hi) } ];
		}
	}
	@items = (@items[ $round % @items .. $#items ], @items[ 0 .. $round % @items - 1 ]) if @items;
	for my $it (@items)
	{
		my ($name, $shape, $code) = @$it;
		drop_leftovers();
		settle();
		my %k = (round => $round, end => $end->{label}, shape => $shape // '', variant => $name,
			par => $name =~ /parallel/ ? $par : 1, rows => $window_rows{ dname($end->{label}) }, mode_keys());
		my $r = eval { measured("$k{mode} $end->{label} $k{shape} $name r$round", $code) };
		if (!$r)
		{
			record({}, %k, check => 'FAILED: ' . (split /\n/, $@)[0]);
			next;
		}
		if ($name =~ /^sink/)
		{
			my $n = ch("SELECT count() FROM merge('$db', '^sink_')");
			$r->{check} = $n == $window_rows{ dname($end->{label}) } ? check_result(fingerprint("merge('$db', '^sink_')", $lo, $hi),
				source_window_ref('events', $lo, $hi), pg_window_ref('events', $lo, $hi), '') : "FAILED: the sink holds $n rows";
		}
		else
		{
			# A binary COPY adds a 19-byte header and a 2-byte trailer per
			# statement; the rest must be the same bytes every time.
			my $payload = $r->{bytes} - 21 * $r->{copies};
			$copy_payload{ dname($end->{label}) } //= $payload;
			$r->{check} = $payload == $copy_payload{ dname($end->{label}) } ? 'ok'
			  : "FAILED: COPY produced $payload bytes of rows, another COPY $copy_payload{dname($end->{label})}";
		}
		drop_leftovers();
		record($r, %k);
	}
}

# dpwin with a 10x longer window, for the worker's memory.
sub memory_variant
{
	my ($round) = @_;
	my $n = max(@sizes);
	my %k = (round => $round, end => '00:00', days => $n, shape => 'day', variant => "dpwin ${mem_wdays}-day window", par => $par,
		mode_keys());
	return record({}, %k, check => "not run: the largest target holds fewer than $mem_wdays days") if $n < $mem_wdays + 1;
	my $hi = $end_epoch;
	my $lo = $hi - $mem_wdays * 86400;
	my $b = base_name('day', $n);
	drop_leftovers();
	clone_base($b, 't_mem');
	settle();
	my $r = eval { v_dpwin(dname('b_mem'), $hi) };
	return record({}, %k, check => 'FAILED: ' . (split /\n/, $@)[0]) unless $r;
	$r->{check} = check_result(fingerprint("$db.t_mem", $lo, $hi), source_window_ref('events', $lo, $hi),
		pg_window_ref('events', $lo, $hi), base_outside_ref($b, $lo, $hi));
	drop_leftovers();
	record($r, %k);
}

# skip_unchanged: a $skip_days-day lookback with 1-day chunks where one
# day of the source changed since the last refresh; the same refresh with
# and without the route option, on two clones of the same base, after an
# unmeasured refresh that brought both in line with the source.
sub skip_variants
{
	my ($round) = @_;
	my $hi = $end_epoch;
	my $lo = $hi - $skip_days * 86400;
	my $b = base_name('day', max(@sizes));
	my %k = (round => $round, end => '00:00', days => max(@sizes), shape => 'day', par => $par, mode_keys());
	if (!have_skip_option())
	{
		record({}, %k, variant => 'dpwin skip_unchanged', check => 'not run: dpwin.routes has no skip_unchanged column');
		return;
	}
	for my $v (qw(on off)) { drop_leftovers(); clone_base($b, "t_skip_$v"); v_dpwin(dname("b_skip_$v"), $hi); }
	drop_leftovers();
	my $day = $skip_changed eq 'newest' ? $hi - 86400 : $lo + (($round * 7 + 3) % $skip_days) * 86400;
	psql("UPDATE $pgs.events_skip SET qty = coalesce(qty, 0) + 1 WHERE w >= '" . ts($day) . "+00' AND w < '"
		  . ts($day + 86400) . "+00' AND id % 50 = 0");
	my $pgref = pg_window_ref('events_skip', $lo, $hi, 'fresh');
	my $inside = source_window_ref('events_skip', $lo, $hi, 'fresh');
	for my $v ($round % 2 ? qw(on off) : qw(off on))
	{
		settle();
		my $name = $v eq 'on' ? 'dpwin skip_unchanged' : 'dpwin skip reference';
		my $r = eval { v_dpwin(dname("b_skip_$v"), $hi) };
		if (!$r) { record({}, %k, variant => $name, check => 'FAILED: ' . (split /\n/, $@)[0]); next; }
		$r->{check} = check_result(fingerprint("$db.t_skip_$v", $lo, $hi), $inside, $pgref, base_outside_ref($b, $lo, $hi));
		drop_leftovers();
		record($r, %k, variant => $name);
	}
}

sub skip_setup
{
	return unless on('skip') && have_skip_option();
	my $n = max(@sizes);
	my $hi = $end_epoch;
	my $lo = $hi - $skip_days * 86400;
	psql("DROP TABLE IF EXISTS $pgs.events_skip;
		CREATE TABLE $pgs.events_skip (LIKE $pgs.events INCLUDING ALL);
		INSERT INTO $pgs.events_skip SELECT * FROM $pgs.events WHERE w >= '" . ts($lo) . "+00';
		VACUUM ANALYZE $pgs.events_skip;");
	for my $v (qw(on off))
	{
		clone_base(base_name('day', $n), "t_skip_$v");
		route(dname("b_skip_$v"), "t_skip_$v", $skip_days, source => 'events_skip');
	}
	psql("SELECT dpwin.alter_route('" . dname('b_skip_on') . "', skip_unchanged => true)");
}

# The backfill variants (docs/benchmark.md, "The variants"), each on a
# fresh clone of the largest day-partitioned base, in an order that
# rotates: CALL dpwin.backfill over $bf_windows windows of the lookback
# ending at the source's last midnight, one refresh of their span (a
# route whose lookback is the span), and the same windows as single
# refreshes in one session.  Each route has the benchmark's chunk interval
# and parallelism, through the current round trip's foreign server.
sub backfill_variants
{
	my ($round) = @_;
	my $n = max(@sizes);
	my $hi = $end_epoch;
	my $lo = $hi - $bf_days * 86400;
	my $b = base_name('day', $n);
	my %k = (round => $round, end => '00:00', days => $n, shape => 'day', par => $par, mode_keys());
	my @items = ([ 'backfill', 'bf', $wdays, sub { v_backfill($_[0], $lo, $hi, $bf_windows) } ],
		[ 'backfill span', 'bf_span', $bf_days, sub { v_dpwin($_[0], $hi) } ]);
	push @items, [ 'backfill singles', 'bf_singles', $wdays, sub { v_singles($_[0], map { $hi - $_ * $wdays * 86400 } 0 .. $bf_windows - 1) } ]
	  if $bf_singles;
	@items = (@items[ $round % @items .. $#items ], @items[ 0 .. $round % @items - 1 ]);
	for my $it (@items)
	{
		my ($variant, $tn, $lookback, $code) = @$it;
		my $t = "t_$tn";
		my $route = dname("b_$tn");
		drop_leftovers();
		route_for_net($route, $t, $lookback);
		clone_base($b, $t);
		settle();
		my $r = eval { measured("$k{mode} 00:00 day_$n $variant r$round", sub { $code->($route) }) };
		if (!$r)
		{
			logmsg("$variant on $t failed: $@");
			record({}, %k, variant => $variant, check => 'FAILED: ' . (split /\n/, $@)[0]);
			next;
		}
		$r->{check} = check_result(fingerprint("$db.$t", $lo, $hi), source_window_ref('events', $lo, $hi),
			pg_window_ref('events', $lo, $hi), base_outside_ref($b, $lo, $hi));
		drop_leftovers();
		record($r, %k, variant => $variant);
	}
}

sub mode_keys
{
	return (mode => "$cur_hosts/$cur_net" . (@rpds > 1 ? " r$rpd" : ''), hosts => $cur_hosts, rtt => $cur_net,
		rows_per_day => $rpd);
}

# dpwin's route to $t through the foreign server of the current round trip.
my %route_server;

sub route_for_net
{
	my ($name, $t, $lookback) = @_;
	my $srv = $net{$cur_net}{server};
	return if ($route_server{$name} // '') eq $srv;
	route($name, $t, $lookback // $wdays, server => $srv, chunk_days => $chunk_days);
	$route_server{$name} = $srv;
}

# One round: for each window size (in an order that rotates from round to
# round, as the host modes' and the variants' do), each window end and
# host mode, the limits, then every size and shape of target.
sub one_round
{
	my ($round, @endlist) = @_;
	my @m = (@modes[ $round % @modes .. $#modes ], @modes[ 0 .. $round % @modes - 1 ]);
	my @d = (@rpds[ $round % @rpds .. $#rpds ], @rpds[ 0 .. $round % @rpds - 1 ]);
	for my $density (@d)
	{
		set_density($density);
		for my $end (@endlist)
		{
			for my $mode (@m)
			{
				set_mode($mode);
				limit_variants($round, $end);
				for my $n (@sizes)
				{
					for my $s (@shapes)
					{
						my @v = grep { on($_) } qw(dpwin naive expert);
						next unless @v;
						@v = (@v[ $round % @v .. $#v ], @v[ 0 .. $round % @v - 1 ]);
						target_variant($round, $end, $n, $s, $_) for @v;
					}
				}
			}
		}
		# the backfill variants in every host mode, as goal 9 is read in each
		if (on('backfill'))
		{
			for my $mode (@m) { set_mode($mode); backfill_variants($round); }
		}
		set_mode($modes[0]);
		memory_variant($round) if on('memory');
		skip_variants($round) if on('skip');
	}
}

# ---- run -------------------------------------------------------------------------------------

sub loadavg { open my $f, '<', '/proc/loadavg' or return '?'; my $l = <$f>; return join(' ', (split ' ', $l)[0 .. 2]); }

my %meta = (
	rows_per_day => "@rpds", source_days => $src_days, window_days => $wdays, memory_window_days => $mem_wdays,
	skip_days => $skip_days, skip_changed => $skip_changed, sizes => "@sizes", shapes => "@shapes", ends => "@ends", parallelism => $par,
	chunk_days => $chunk_days, target => $target_mode, backfill_windows => $bf_windows, backfill_singles => $bf_singles,
	rounds => $rounds, only => join(',', grep { on($_) } @kinds), hosts => "@hosts", rtt_ms => "@rtts",
	shared_buffers => $ENV{BENCH_SHARED_BUFFERS} // '?',
);
logmsg('parameters: ' . join(' ', map { "$_=$meta{$_}" } sort keys %meta));
my @endlist = map {
	my ($h, $m) = split /:/;
	my $hi = $h == 0 && $m == 0 ? $end_epoch : $end_epoch - 86400 + $h * 3600 + $m * 60;
	{ label => $_, hi => $hi };
} @ends;
net_setup();
stamps_start();
for my $density (@rpds)
{
	set_density($density);
	pg_dataset();
	ch_dataset();
	for my $e (@endlist)
	{
		my $lo = $e->{hi} - $wdays * 86400;
		my $k = dname($e->{label});
		$window_rows{$k} = psql("SELECT count(*) FROM $pgs.events WHERE w >= '" . ts($lo) . "+00' AND w < '" . ts($e->{hi}) . "+00'");
		logmsg("$pgs: window ending $e->{label}: [" . ts($lo) . ', ' . ts($e->{hi}) . "), $window_rows{$k} rows");
	}
	for my $n (grep { on('dpwin') || on('naive') || on('expert') } @sizes)
	{
		for my $s (@shapes)
		{
			clone_base(base_name($s, $n), "t_${s}_$n");
			route(dname("b_${s}_$n"), "t_${s}_$n", $wdays, chunk_days => $chunk_days);
			$route_server{ dname("b_${s}_$n") } = $server;
		}
	}
	if (on('memory') && max(@sizes) >= $mem_wdays + 1)
	{
		clone_base(base_name('day', max(@sizes)), 't_mem');
		route(dname('b_mem'), 't_mem', $mem_wdays);
	}
	skip_setup();
}
$meta{load_start} = loadavg();
$meta{started} = strftime('%Y-%m-%d %H:%M:%S UTC', gmtime());
unlink "$out/results.partial.csv";
partial_csv(map { $_ => $_ } csv_cols());
partial_csv(record => 'meta', label => $_, value => $meta{$_}) for sort keys %meta;
partial_csv(record => 'window', window_end => $_, rows => $window_rows{$_}) for sort keys %window_rows;
my $t0 = now();
for my $round (0 .. $rounds - 1)
{
	logmsg("round $round");
	one_round($round, @endlist);
}
$meta{load_end} = loadavg();
set_mode('shared/direct');
$meta{run_seconds} = sprintf('%.0f', now() - $t0);
if (@client_start)
{
	my @c = sort { $a <=> $b } @client_start;
	$meta{client_start_ms} = sprintf('%.0f (%.0f-%.0f)', 1000 * $c[ $#c / 2 ], 1000 * $c[0], 1000 * $c[-1]);
}
my %tables;
for my $density (@rpds)
{
	set_density($density);
	ch_drop(map { "t_$_" } 'mem', 'skip_on', 'skip_off', 'bf', 'bf_span', 'bf_singles',
		map { my $s = $_; map { "${s}_$_" } @sizes } @shapes);
	drop_leftovers();
	%tables = (%tables, %{ table_sizes() });
}

bench_report(
	runs => \@runs, meta => \%meta, window_rows => \%window_rows, sizes => \@sizes, shapes => \@shapes,
	ends => \@ends, modes => [ run_modes(\@hosts, \@rtts, \@rpds) ], par => $par, wdays => $wdays, mem_wdays => $mem_wdays, out => $out, csv => $csv_path,
	root => $root, tables => \%tables,
);

# The sizes of what the run measured against, for docs/benchmark.md.
sub table_sizes
{
	my %s;
	for my $l (ch_lines("SELECT table, sum(rows), sum(bytes_on_disk), uniqExact(partition_id) FROM system.parts"
			  . " WHERE database = '$db' AND active AND startsWith(table, 'base_') GROUP BY table ORDER BY table"))
	{
		my ($t, $r, $b, $p) = split /\t/, $l;
		$s{ @rpds > 1 ? "clickhouse $db.$t" : "clickhouse $t" } = { rows => $r, bytes => $b, partitions => $p };
	}
	my ($r, $b) = split /\|/, psql("SELECT count(*), pg_total_relation_size('$pgs.events') FROM $pgs.events");
	$s{"postgresql $pgs.events"} = { rows => $r, bytes => $b, partitions => '' };
	return \%s;
}
