#!/usr/bin/perl
#
# test/bench/bench.pl — the dpwin benchmark (run it through test/bench/run.sh;
# docs/benchmark.md explains every line of its output).
#
# Against the sandbox whose environment is loaded (PGHOST, DPWIN_CH_URL,
# ...), it generates a deterministic `events` table in PostgreSQL and the
# matching ClickHouse targets, then measures, for one window of
# BENCH_WINDOW_DAYS days:
#
#   dpwin    dpwin_refresh end to end at each parallelism, with its phases
#   peer     the same refresh in plain ClickHouse SQL (postgresql() table
#            function, INSERT of the kept rows, EXCHANGE TABLES)
#   source   COPY (SELECT ... window) TO STDOUT (FORMAT binary) into a pipe
#   sink     the window's RowBinary, pre-encoded in a file, POSTed with curl
#   scaling  the same window on a short and on a long partitioned target
#   window   dpwin with a window 10x longer (worker memory must stay flat)
#
# and prints one table, writes it as CSV, and draws the phase times with
# gnuplot.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Spec;
use IPC::Run qw(run timeout);
use JSON::PP qw(decode_json);
use POSIX qw(ceil floor);
use Time::HiRes qw(time usleep);

my $root = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
my $out = $ENV{BENCH_OUT} // "$root/test/bench/out";
make_path($out);

# ---- parameters -------------------------------------------------------------

my $days = $ENV{BENCH_DAYS} // 100;
my $rpd = $ENV{BENCH_ROWS_PER_DAY} // 100_000;
my $wdays = $ENV{BENCH_WINDOW_DAYS} // 7;
my $big_wdays = $ENV{BENCH_BIG_WINDOW_DAYS} // ($wdays * 10 <= $days ? $wdays * 10 : $days);
my $srpd = $ENV{BENCH_SCALE_ROWS_PER_DAY} // $rpd;
my $s_small = $ENV{BENCH_SCALE_SMALL_DAYS} // 30;
my $s_large = $ENV{BENCH_SCALE_LARGE_DAYS} // 300;
my @pars = split ' ', ($ENV{BENCH_PARALLELISM} // '1 2 4');
my $repeat = $ENV{BENCH_REPEAT} // 3;
my $only = $ENV{BENCH_ONLY};    # comma-separated variant groups, for development

die "BENCH_WINDOW_DAYS must be less than BENCH_DAYS\n" unless $wdays < $days;
die "BENCH_BIG_WINDOW_DAYS must be at most BENCH_DAYS\n" if $big_wdays > $days;
die "BENCH_SCALE_SMALL_DAYS must be at least the window\n" if $s_small < $wdays;

my $start_ts = '2026-01-01 00:00:00';
my $pgdb = $ENV{PGDATABASE} or die "no sandbox environment (PGDATABASE)\n";
my $pgport = $ENV{PGPORT};
my $chdb = 'dpwin_bench';
my $server = 'sandbox_ch';
my $cols = 'id, w, amount, note, qty, flag';

sub group_on { my ($g) = @_; return !$only || grep { $_ eq $g } split /,/, $only; }

sub logmsg { printf STDERR "bench: %s\n", join('', @_); }

# ---- PostgreSQL and ClickHouse ------------------------------------------------

sub psql
{
	my ($sql, %o) = @_;
	my ($o, $e) = ('', '');
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1');
	push @cmd, '-F', $o{sep} if $o{sep};
	run \@cmd, '<', \$sql, '>', $o{to} // \$o, '2>', \$e, timeout($o{timeout} // 7200)
	  or die "psql failed: $e\nSQL: " . substr($sql, 0, 500) . "\n";
	chomp $o;
	return $o;
}

# ch($sql, %o): the answer; dies on an error.  params: URL settings; data:
# a file to POST as the body (then the query goes in the URL); to: a file
# to write the answer to.
sub ch
{
	my ($sql, %o) = @_;
	my %p = (async_insert => 0, insert_deduplicate => 0, %{ $o{params} // {} }, query => $sql);
	my $url = "$ENV{DPWIN_CH_URL}/?" . join('&', map { "$_=" . uri_escape($p{$_}) } sort keys %p);
	my @cmd = ('curl', '-sS', '--fail-with-body', '-X', 'POST', '--max-time', $o{timeout} // 7200,
		'-u', "$ENV{DPWIN_CH_USER}:$ENV{DPWIN_CH_PASSWORD}");
	push @cmd, '-H', 'Transfer-Encoding: chunked', '--data-binary', "\@$o{data}" if $o{data};
	push @cmd, '-o', $o{to} if $o{to};
	push @cmd, $url;
	my ($in, $o, $e) = ('', '', '');
	run \@cmd, '<', \$in, '>', \$o, '2>', \$e, timeout(($o{timeout} // 7200) + 10)
	  or die "ClickHouse failed: $e $o\nSQL: " . substr($sql, 0, 500) . "\n";
	chomp $o;
	return $o;
}

sub uri_escape
{
	my ($s) = @_;
	$s =~ s/([^A-Za-z0-9\-_.~])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

sub timed
{
	my ($code) = @_;
	my $t0 = time();
	my @r = $code->();
	return (time() - $t0, @r);
}

# ---- peak memory of dpwin's processes -----------------------------------------

# A child process polls the postmaster's children every 20 ms and keeps,
# for coordinators and chunk workers, the largest VmHWM (peak resident set,
# including shared buffers the process touched) and the largest RssAnon
# seen (private memory: palloc, libcurl, encode buffers).
my $postmaster = do {
	open my $f, '<', "$ENV{DPWIN_PGDATA}/postmaster.pid" or die "no postmaster.pid: $!";
	my $l = <$f>;
	chomp $l;
	$l;
};

sub rss_start
{
	my $file = "$out/.rss.$$";
	unlink $file;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return { pid => $pid, file => $file } if $pid;

	# The sampler must not outlive the benchmark, nor hold its output open.
	my $parent = getppid();
	open STDOUT, '>', '/dev/null';
	open STDIN, '<', '/dev/null';
	my %peak = (coord_hwm => 0, coord_anon => 0, coord_shmem => 0, worker_hwm => 0, worker_anon => 0,
		worker_shmem => 0, workers => 0);
	my %seen;
	my $stop = 0;
	local $SIG{TERM} = sub { $stop = 1 };
	my $children = "/proc/$postmaster/task/$postmaster/children";
	while (!$stop && getppid() == $parent)
	{
		if (open my $cf, '<', $children)
		{
			my @pids = split ' ', (<$cf> // '');
			close $cf;
			for my $p (@pids)
			{
				my $role = $seen{$p};
				if (!defined $role)
				{
					open my $c, '<', "/proc/$p/cmdline" or next;
					my $cmd = <$c> // '';
					close $c;
					$role = $cmd =~ /dpwin coordinator/ ? 'coord' : $cmd =~ /dpwin chunk worker/ ? 'worker' : '';
					# a fresh child may not have its title yet
					$seen{$p} = $role if $role || $cmd =~ /^postgres: /;
					$peak{workers}++ if $role eq 'worker';
				}
				next unless $role;
				open my $s, '<', "/proc/$p/status" or next;
				while (my $l = <$s>)
				{
					if ($l =~ /^VmHWM:\s+(\d+)/) { $peak{"${role}_hwm"} = $1 if $1 > $peak{"${role}_hwm"}; }
					elsif ($l =~ /^RssAnon:\s+(\d+)/) { $peak{"${role}_anon"} = $1 if $1 > $peak{"${role}_anon"}; }
					elsif ($l =~ /^RssShmem:\s+(\d+)/) { $peak{"${role}_shmem"} = $1 if $1 > $peak{"${role}_shmem"}; }
				}
				close $s;
			}
		}
		usleep(20_000);
	}
	open my $f, '>', $file or exit 1;
	print $f join(' ', map { "$_=$peak{$_}" } sort keys %peak), "\n";
	close $f;
	exit 0;
}

sub rss_stop
{
	my ($h) = @_;
	kill 'TERM', $h->{pid};
	waitpid($h->{pid}, 0);
	open my $f, '<', $h->{file} or return {};
	my %r = map { split /=/ } split ' ', scalar(<$f>);
	close $f;
	unlink $h->{file};
	$r{$_} = sprintf('%.1f', $r{$_} / 1024) for grep { /hwm|anon|shmem/ } keys %r;    # kB -> MB
	return \%r;
}

# ---- dataset --------------------------------------------------------------------

my $sig = "v1 days=$days rows_per_day=$rpd";
my $end_sql = "timestamptz '$start_ts+00' + interval '$days days'";
my $end = psql("SELECT to_char(($end_sql) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')");
my $ch_end = "toDateTime64('$end', 6, 'UTC')";

sub window_bounds
{
	my ($nd) = @_;
	my $lo = psql("SELECT to_char(($end_sql - interval '$nd days') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')");
	return ($lo, $end);
}

sub ch_window { my ($lo, $hi) = @_; return "w >= toDateTime64('$lo', 6, 'UTC') AND w < toDateTime64('$hi', 6, 'UTC')"; }

sub pg_dataset
{
	my $have = eval { psql("SELECT sig FROM bench.meta") } // '';
	if ($have eq $sig)
	{
		logmsg("PostgreSQL dataset is there ($sig)");
		return;
	}
	logmsg("generating bench.events: $days days x $rpd rows (+ duplicates, NULLs)");
	my ($t) = timed(sub {
		psql("DROP SCHEMA IF EXISTS bench CASCADE; CREATE SCHEMA bench;
			CREATE TABLE bench.meta (sig text);
			CREATE TABLE bench.events (id bigint NOT NULL, w timestamptz, amount numeric(18,2),
				note text, qty integer, flag boolean);
			INSERT INTO bench.events
			SELECT g,
				CASE WHEN g % 37 = 5 THEN NULL
					 ELSE timestamptz '$start_ts+00' + interval '1 day' * (g / $rpd)
						  + interval '1 microsecond' * ((g % $rpd) * (86400000000 / $rpd)) END,
				CASE WHEN g % 43 = 1 THEN NULL ELSE ((g * 7919) % 10000000000) / 100.0 END,
				CASE WHEN g % 47 = 2 THEN NULL ELSE left(md5(g::text), 30) || '-' || lpad(g::text, 9, '0') END,
				CASE WHEN g % 53 = 3 THEN NULL ELSE ((g * 31) % 2000000)::integer - 1000000 END,
				CASE WHEN g % 59 = 4 THEN NULL ELSE g % 3 = 0 END
			  FROM generate_series(0, ${days}::bigint * $rpd - 1) g;
			-- duplicates: identical rows, about 2.4 %
			INSERT INTO bench.events SELECT * FROM bench.events WHERE id % 41 = 6;
			CREATE INDEX events_w ON bench.events (w);
			VACUUM ANALYZE bench.events;
			INSERT INTO bench.meta VALUES ('$sig');");
	});
	logmsg(sprintf("generated in %.1f s", $t));
}

my $ch_cols = "(id Int64, w Nullable(DateTime64(6, 'UTC')), amount Nullable(Decimal(18, 2)),"
  . " note Nullable(String), qty Nullable(Int32), flag Nullable(Bool))";
my $by_day = "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1";

sub pg_source
{
	return "postgresql('127.0.0.1:$pgport', '$pgdb', 'events', 'postgres', '', 'bench')";
}

# Wait until ClickHouse has no merge running in the bench database.
sub settle
{
	for (1 .. 1200)
	{
		return if ch("SELECT count() FROM system.merges WHERE database = '$chdb'") == 0;
		usleep(250_000);
	}
	logmsg("merges did not settle");
}

sub ch_table_exists
{
	my ($t) = @_;
	return ch("SELECT count() FROM system.tables WHERE database = '$chdb' AND name = '$t'") == 1;
}

sub ch_targets
{
	my $chsig = "$sig small=$s_small large=$s_large scale_rows_per_day=$srpd";
	ch("CREATE DATABASE IF NOT EXISTS $chdb ENGINE = Atomic");
	my $have = ch_table_exists('meta') ? ch("SELECT any(sig) FROM $chdb.meta") : '';
	if ($have eq $chsig)
	{
		logmsg("ClickHouse targets are there");
		return;
	}
	logmsg("loading the ClickHouse targets");
	ch("DROP TABLE IF EXISTS $chdb.$_") for qw(meta events_flat events_day events_small events_large);
	my ($t) = timed(sub {
		ch("CREATE TABLE $chdb.events_flat $ch_cols ENGINE = MergeTree ORDER BY id");
		ch("CREATE TABLE $chdb.events_day $ch_cols ENGINE = MergeTree $by_day");
		ch("INSERT INTO $chdb.events_flat SELECT $cols FROM " . pg_source());
		ch("INSERT INTO $chdb.events_day SELECT * FROM $chdb.events_flat", params => { max_partitions_per_insert_block => 0 });

		# The scaling pair: the last $s_small and $s_large days, the days
		# before the dataset's first one made of shifted copies of it (new
		# ids), $srpd rows a day outside the real data's window-independent
		# sample, NULL-window rows in proportion.
		ch("CREATE TABLE $chdb.events_small $ch_cols ENGINE = MergeTree $by_day");
		ch("CREATE TABLE $chdb.events_large $ch_cols ENGINE = MergeTree $by_day");
		my $sample = $srpd < $rpd ? " AND intHash32(id) % $rpd < $srpd" : '';
		ch("INSERT INTO $chdb.events_small SELECT * FROM $chdb.events_flat WHERE"
			  . " (w >= $ch_end - toIntervalDay($s_small) OR (w IS NULL AND intHash32(id) % $days < $s_small))$sample",
			params => { max_partitions_per_insert_block => 0 });
		for my $k (0 .. ceil($s_large / $days) - 1)
		{
			my $shift = $k * $days;
			ch("INSERT INTO $chdb.events_large SELECT id + $k * 1000000000000, w - toIntervalDay($shift), amount, note, qty, flag"
				  . " FROM $chdb.events_flat WHERE (w - toIntervalDay($shift) >= $ch_end - toIntervalDay($s_large)"
				  . " OR (w IS NULL AND intHash32(id) % $days < least($days, $s_large - $shift)))$sample",
				params => { max_partitions_per_insert_block => 0 });
		}
		for my $tb (qw(events_flat events_day events_small events_large))
		{
			ch("OPTIMIZE TABLE $chdb.$tb FINAL", timeout => 7200);
		}
		settle();
		ch("CREATE TABLE $chdb.meta (sig String) ENGINE = MergeTree ORDER BY tuple()");
		ch("INSERT INTO $chdb.meta VALUES ('$chsig')");
	});
	logmsg(sprintf("loaded in %.1f s", $t));
}

# Between measurements: no backups, the window partitions merged again, no
# merge running.
sub reset_targets
{
	for my $b (split /\n/, ch("SELECT name FROM system.tables WHERE database = '$chdb' AND startsWith(name, '_dpwin_')"))
	{
		ch("DROP TABLE $chdb.`$b`");
	}
	ch("DROP TABLE IF EXISTS $chdb.peer_gen");
	ch("DROP TABLE IF EXISTS $chdb.sink");
	for my $tb (qw(events_day events_small events_large))
	{
		next unless ch_table_exists($tb);
		for my $p (split /\n/, ch("SELECT partition_id FROM system.parts WHERE database = '$chdb' AND table = '$tb' AND active"
				  . " GROUP BY partition_id HAVING count() > 1"))
		{
			ch("OPTIMIZE TABLE $chdb.$tb PARTITION ID '$p' FINAL");
		}
	}
	settle();
}

# ---- routes ------------------------------------------------------------------------

sub route
{
	my ($name, $table, $nd, $par) = @_;
	psql("SELECT dpwin.drop_route('$name') FROM dpwin.route WHERE route_name = '$name';
		SELECT dpwin.create_route('$name', 'bench.events', 'w', '$server', '$chdb', '$table',
			interval '$nd days', interval '1 day', parallelism => $par)");
}

# ---- measurements -----------------------------------------------------------------

my @results;
my %window_rows;      # days -> rows of that window
my %window_bytes;     # days -> RowBinary bytes of that window

sub window_facts
{
	my ($nd) = @_;
	return if exists $window_rows{$nd};
	my ($lo, $hi) = window_bounds($nd);
	$window_rows{$nd} = psql("SELECT count(*) FROM bench.events WHERE w >= '$lo+00' AND w < '$hi+00'");
}

sub median_of
{
	my @runs = sort { $a->{wall} <=> $b->{wall} } @_;
	return $runs[ floor($#runs / 2) ];
}

sub dpwin_run
{
	my (%o) = @_;
	my $route = "bench_$o{table}_$o{days}";
	route($route, $o{table}, $o{days}, $o{par});
	window_facts($o{days});
	my @runs;
	for (1 .. $repeat)
	{
		reset_targets();
		my $rss = rss_start();
		my ($wall, $res) = eval {
			timed(sub { psql("SELECT details->'evidence' FROM dpwin_refresh('$route', '$end+00')") });
		};
		my $mem = rss_stop($rss);
		die $@ if $@;
		my $ev = decode_json($res);
		my $ph = $ev->{phases};
		die "dpwin copied $ev->{source_rows} rows, expected $window_rows{$o{days}}\n"
		  unless $ev->{source_rows} == $window_rows{ $o{days} };
		$window_bytes{ $o{days} } = $ev->{encoded_bytes};
		push @runs, {
			wall => $wall, stage => $ph->{stage_seconds}, build => $ph->{build_seconds},
			verify => $ph->{verify_seconds}, publish => $ph->{publish_seconds},
			rows => $ev->{source_rows}, bytes => $ev->{encoded_bytes}, mem => $mem,
			partitions => $ev->{partitions},
		};
		logmsg(sprintf("%s p%d: %.2f s (stage %.2f build %.2f verify %.2f publish %.2f) worker VmHWM %s MB",
				$o{table}, $o{par}, $wall, $ph->{stage_seconds}, $ph->{build_seconds},
				$ph->{verify_seconds}, $ph->{publish_seconds}, $mem->{worker_hwm}));
	}
	my $m = median_of(@runs);
	$m->{other} = $m->{wall} - $m->{stage} - $m->{build} - $m->{verify} - $m->{publish};
	push @results, { %$m, name => $o{name}, kind => 'dpwin', target => $o{table}, par => $o{par} };
	return $m;
}

sub peer_run
{
	my (%o) = @_;
	my $t = "$chdb.$o{table}";
	my ($lo, $hi) = window_bounds($wdays);
	window_facts($wdays);
	my @runs;
	for (1 .. $repeat)
	{
		reset_targets();
		my ($t_create) = timed(sub { ch("CREATE TABLE $chdb.peer_gen AS $t") });
		my ($t_window) = timed(sub {
			ch("INSERT INTO $chdb.peer_gen SELECT $cols FROM " . pg_source() . " WHERE " . ch_window($lo, $hi));
		});
		my ($t_keep) = timed(sub {
			ch("INSERT INTO $chdb.peer_gen SELECT $cols FROM $t WHERE w < toDateTime64('$lo', 6, 'UTC')"
				  . " OR w >= toDateTime64('$hi', 6, 'UTC') OR w IS NULL",
				params => { max_partitions_per_insert_block => 0 });
		});
		my $n = ch("SELECT count() FROM $chdb.peer_gen WHERE " . ch_window($lo, $hi));
		die "the peer loaded $n window rows, expected $window_rows{$wdays}\n" unless $n == $window_rows{$wdays};
		my ($t_exchange) = timed(sub { ch("EXCHANGE TABLES $t AND $chdb.peer_gen") });
		my ($t_drop) = timed(sub { ch("DROP TABLE $chdb.peer_gen") });
		my $wall = $t_create + $t_window + $t_keep + $t_exchange + $t_drop;
		push @runs, { wall => $wall, stage => $t_window, build => $t_keep, verify => 0,
			publish => $t_exchange, other => $t_create + $t_drop, rows => $window_rows{$wdays} };
		logmsg(sprintf("peer %s: %.2f s (window insert %.2f, keep insert %.2f, exchange %.3f)",
				$o{table}, $wall, $t_window, $t_keep, $t_exchange));
	}
	my $m = median_of(@runs);
	push @results, { %$m, name => $o{name}, kind => 'peer', target => $o{table}, par => 1 };
}

sub source_run
{
	my ($lo, $hi) = window_bounds($wdays);
	my @runs;
	for (1 .. $repeat)
	{
		my $bytes = '';
		my ($wall) = timed(sub {
			my ($e) = ('');
			run [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-c',
				"COPY (SELECT $cols FROM bench.events WHERE w >= '$lo+00' AND w < '$hi+00') TO STDOUT (FORMAT binary)" ],
			  '|', [ 'wc', '-c' ], '>', \$bytes, '2>', \$e
			  or die "COPY failed: $e";
		});
		chomp $bytes;
		push @runs, { wall => $wall, stage => $wall, build => 0, verify => 0, publish => 0, other => 0,
			rows => $window_rows{$wdays}, bytes => $bytes + 0 };
		logmsg(sprintf("source limit: %.2f s, %d bytes", $wall, $bytes));
	}
	push @results, { %{ median_of(@runs) }, name => 'source limit', kind => 'source', target => 'bench.events', par => 1 };
}

sub sink_run
{
	my ($lo, $hi) = window_bounds($wdays);
	my $file = "$out/window.rowbinary";
	ch("SELECT $cols FROM $chdb.events_day WHERE " . ch_window($lo, $hi) . " FORMAT RowBinary", to => $file);
	my $bytes = -s $file;
	my @runs;
	for (1 .. $repeat)
	{
		reset_targets();
		ch("CREATE TABLE $chdb.sink AS $chdb.events_day");
		my ($wall) = timed(sub {
			ch("INSERT INTO $chdb.sink ($cols) FORMAT RowBinary", data => $file);
		});
		my $n = ch("SELECT count() FROM $chdb.sink");
		die "the sink holds $n rows, expected $window_rows{$wdays}\n" unless $n == $window_rows{$wdays};
		push @runs, { wall => $wall, stage => $wall, build => 0, verify => 0, publish => 0, other => 0,
			rows => $n, bytes => $bytes };
		logmsg(sprintf("sink limit: %.2f s, %d bytes", $wall, $bytes));
	}
	unlink $file;
	push @results, { %{ median_of(@runs) }, name => 'sink limit', kind => 'sink', target => 'empty MergeTree', par => 1 };
}

# ---- run ----------------------------------------------------------------------------

logmsg("parameters: BENCH_DAYS=$days BENCH_ROWS_PER_DAY=$rpd BENCH_WINDOW_DAYS=$wdays"
	  . " BENCH_BIG_WINDOW_DAYS=$big_wdays BENCH_SCALE_ROWS_PER_DAY=$srpd"
	  . " BENCH_SCALE_SMALL_DAYS=$s_small BENCH_SCALE_LARGE_DAYS=$s_large"
	  . " BENCH_PARALLELISM='@pars' BENCH_REPEAT=$repeat");
pg_dataset();
ch_targets();
my $load_start = do { open my $f, '<', '/proc/loadavg'; join(' ', (split ' ', scalar <$f>)[0 .. 2]) };
window_facts($wdays);
logmsg("window [" . join(', ', window_bounds($wdays)) . "): $window_rows{$wdays} rows");

if (group_on('dpwin'))
{
	dpwin_run(name => "dpwin p$_ partitioned", table => 'events_day', days => $wdays, par => $_) for @pars;
	dpwin_run(name => 'dpwin p2 unpartitioned', table => 'events_flat', days => $wdays, par => 2);
}
if (group_on('peer'))
{
	peer_run(name => 'peer partitioned', table => 'events_day');
	peer_run(name => 'peer unpartitioned', table => 'events_flat');
}
source_run() if group_on('limits');
sink_run() if group_on('limits');
if (group_on('scaling'))
{
	dpwin_run(name => "dpwin p2 ${s_small}-day", table => 'events_small', days => $wdays, par => 2);
	dpwin_run(name => "dpwin p2 ${s_large}-day", table => 'events_large', days => $wdays, par => 2);
}
if (group_on('window'))
{
	dpwin_run(name => "dpwin p2 ${big_wdays}-day window", table => 'events_day', days => $big_wdays, par => 2);
}
reset_targets();

# ---- report -------------------------------------------------------------------------

sub find { my ($n) = @_; my ($r) = grep { $_->{name} eq $n } @results; return $r; }

for my $r (@results)
{
	$r->{bytes} //= $window_bytes{$wdays} // 0;
	$r->{rows_per_s} = $r->{wall} > 0 ? $r->{rows} / $r->{wall} : 0;
	$r->{mb_per_s} = $r->{wall} > 0 ? $r->{bytes} / 1e6 / $r->{wall} : 0;
}

my @ratios;
sub ratio
{
	my ($label, $num, $den, $goal, $cmp) = @_;
	return unless defined $num && defined $den && $den > 0;
	my $v = $num / $den;
	my $ok = !defined $goal ? '' : ($cmp eq '<=' ? ($v <= $goal ? 'met' : 'missed') : ($v < $goal ? 'met' : 'missed'));
	push @ratios, { label => $label, value => $v, goal => defined $goal ? "$cmp $goal" : '', verdict => $ok };
}

my $d2 = find('dpwin p2 partitioned');
my $d1 = find('dpwin p1 partitioned');
my $df = find('dpwin p2 unpartitioned');
my $pp = find('peer partitioned');
my $pf = find('peer unpartitioned');
my $src = find('source limit');
my $snk = find('sink limit');
my $ss = find("dpwin p2 ${s_small}-day");
my $sl = find("dpwin p2 ${s_large}-day");
my $bw = find("dpwin p2 ${big_wdays}-day window");

ratio('dpwin p2 / peer, partitioned (end to end)', $d2 && $d2->{wall}, $pp && $pp->{wall}, 0.5, '<=');
ratio('dpwin p2 / peer, unpartitioned (end to end)', $df && $df->{wall}, $pf && $pf->{wall});
ratio('dpwin p2 extract+stage / source limit', $d2 && $d2->{stage}, $src && $src->{wall}, 1.5, '<=');
ratio('dpwin p1 extract+stage / source limit', $d1 && $d1->{stage}, $src && $src->{wall});
ratio('dpwin p2 extract+stage / sink limit', $d2 && $d2->{stage}, $snk && $snk->{wall});
ratio("${s_large}-day / ${s_small}-day target, p2 (end to end)", $sl && $sl->{wall}, $ss && $ss->{wall}, 1.25, '<=');
ratio("${s_large}-day / ${s_small}-day target, p2 (build+verify+publish)",
	$sl && $sl->{build} + $sl->{verify} + $sl->{publish}, $ss && $ss->{build} + $ss->{verify} + $ss->{publish});
ratio("worker peak VmHWM, ${big_wdays}-day / ${wdays}-day window", $bw && $bw->{mem}{worker_hwm}, $d2 && $d2->{mem}{worker_hwm}, 1.25, '<=');
ratio("worker peak RssAnon, ${big_wdays}-day / ${wdays}-day window", $bw && $bw->{mem}{worker_anon}, $d2 && $d2->{mem}{worker_anon}, 1.25, '<=');
my ($max_hwm) = sort { $b <=> $a } map { $_->{mem} ? $_->{mem}{worker_hwm} : 0 } @results;
push @ratios, { label => 'worker peak VmHWM over all dpwin runs (MB)', value => $max_hwm // 0, goal => '< 64',
	verdict => defined $max_hwm ? ($max_hwm < 64 ? 'met' : 'missed') : '' };

my @cols = (
	[ 'variant', '%-28s', sub { $_[0]{name} } ],
	[ 'rows', '%9s', sub { $_[0]{rows} } ],
	[ 'wall_s', '%8s', sub { sprintf('%.2f', $_[0]{wall}) } ],
	[ 'rows/s', '%9s', sub { sprintf('%.0f', $_[0]{rows_per_s}) } ],
	[ 'MB/s', '%6s', sub { sprintf('%.1f', $_[0]{mb_per_s}) } ],
	[ 'stage', '%6s', sub { sprintf('%.2f', $_[0]{stage}) } ],
	[ 'build', '%6s', sub { sprintf('%.2f', $_[0]{build}) } ],
	[ 'verify', '%6s', sub { sprintf('%.2f', $_[0]{verify}) } ],
	[ 'publish', '%7s', sub { sprintf('%.3f', $_[0]{publish}) } ],
	[ 'other', '%6s', sub { sprintf('%.2f', $_[0]{other}) } ],
	[ 'coord_MB', '%8s', sub { $_[0]{mem} ? "$_[0]{mem}{coord_hwm}" : '' } ],
	[ 'wrk_MB', '%6s', sub { $_[0]{mem} ? "$_[0]{mem}{worker_hwm}" : '' } ],
	[ 'wrk_anon', '%8s', sub { $_[0]{mem} ? "$_[0]{mem}{worker_anon}" : '' } ],
	[ 'wrk_shm', '%7s', sub { $_[0]{mem} ? "$_[0]{mem}{worker_shmem}" : '' } ],
	[ 'cloned', '%6s', sub { $_[0]{partitions} && $_[0]{partitions}{cloning} ? $_[0]{partitions}{cloned_partitions} : '' } ],
);

sub loadavg { open my $f, '<', '/proc/loadavg' or return '?'; my $l = <$f>; return join(' ', (split ' ', $l)[0 .. 2]); }
my $cpus = do { my $n = 0; open my $f, '<', '/proc/cpuinfo'; while (<$f>) { $n++ if /^processor\s*:/ } $n };
my $table = sprintf("%d days x %d rows/day (%d rows), %d-day window (%d rows, %.1f MB RowBinary); %d CPUs;"
	  . " median of %d; load average at start %s, at end %s\n\n",
	$days, $rpd, psql("SELECT count(*) FROM bench.events"), $wdays, $window_rows{$wdays},
	($window_bytes{$wdays} // 0) / 1e6, $cpus, $repeat, $load_start, loadavg());
$table .= join(' ', map { sprintf($_->[1], $_->[0]) } @cols) . "\n";
for my $r (@results)
{
	$table .= join(' ', map { sprintf($_->[1], $_->[2]->($r)) } @cols) . "\n";
}
$table .= "\n";
for my $x (@ratios)
{
	$table .= sprintf("%-62s %8.3f  %-8s %s\n", $x->{label}, $x->{value}, $x->{goal}, $x->{verdict});
}
print "\n$table";

open my $csv, '>', "$out/results.csv" or die "$out/results.csv: $!";
print $csv "kind,variant,target,parallelism,rows,wall_s,rows_per_s,mb_per_s,stage_s,build_s,verify_s,publish_s,other_s,"
  . "coordinator_vmhwm_mb,worker_vmhwm_mb,worker_rssanon_mb,worker_rssshmem_mb,cloned_partitions,ratio,goal,verdict\n";
for my $r (@results)
{
	printf $csv "%s,%s,%s,%d,%d,%.3f,%.0f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,%s,%s,%s,%s,%s,,,\n",
	  $r->{kind}, $r->{name}, $r->{target}, $r->{par}, $r->{rows}, $r->{wall}, $r->{rows_per_s}, $r->{mb_per_s},
	  $r->{stage}, $r->{build}, $r->{verify}, $r->{publish}, $r->{other},
	  $r->{mem} ? ($r->{mem}{coord_hwm}, $r->{mem}{worker_hwm}, $r->{mem}{worker_anon}, $r->{mem}{worker_shmem}) : ('', '', '', ''),
	  $r->{partitions} && $r->{partitions}{cloning} ? $r->{partitions}{cloned_partitions} : '';
}
printf $csv "ratio,\"%s\",,,,,,,,,,,,,,,,,%.4f,%s,%s\n", $_->{label}, $_->{value}, $_->{goal}, $_->{verdict} for @ratios;
close $csv;
open my $txt, '>', "$out/results.txt" or die;
print $txt $table;
close $txt;

# Phase chart: one stacked bar per variant.
open my $dat, '>', "$out/phases.dat" or die;
for my $r (@results)
{
	printf $dat "\"%s\"\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", $r->{name}, $r->{stage}, $r->{build}, $r->{verify},
	  $r->{publish}, $r->{other} > 0 ? $r->{other} : 0;
}
close $dat;
my $plot = <<"GP";
set terminal pngcairo size 1300,750 noenhanced font ',10'
set output '$out/phases.png'
set title "dpwin benchmark: time per phase ($days days x $rpd rows/day, ${wdays}-day window = $window_rows{$wdays} rows)"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.7
set ylabel 'seconds'
set xtics rotate by -30 left
set key outside top center horizontal maxrows 2
set grid ytics
set bmargin 9
plot '$out/phases.dat' using 2:xtic(1) title 'stage (extract+stage; peer: INSERT from postgresql(); limits: all)', \\
     '' using 3 title 'build (peer: INSERT of kept rows)', \\
     '' using 4 title 'verify', \\
     '' using 5 title 'publish (EXCHANGE)', \\
     '' using 6 title 'other (admission, evidence, start-up, DDL)'
GP
open my $gp, '>', "$out/phases.gp" or die;
print $gp $plot;
close $gp;
my $gperr = '';
run [ 'gnuplot', "$out/phases.gp" ], '2>', \$gperr or logmsg("gnuplot failed: $gperr");
logmsg("wrote $out/results.csv, $out/results.txt, $out/phases.png");
