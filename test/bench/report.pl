#
# test/bench/report.pl — medians, ratios, the printed table and the CSV of
# the dpwin benchmark (loaded by bench.pl; docs/benchmark.md describes the
# output).
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Spec;
use List::Util qw(min max);
use POSIX qw(floor);

my %R;    # the run's facts: runs, meta, sizes, ...

sub rkey
{
	my ($r) = @_;
	return join('|', $r->{mode} // 'shared/direct', $r->{end}, $r->{days} // '', $r->{shape} // '', $r->{variant});
}

# The median run of every variant, by wall time, over its rounds that
# passed their check; a variant with any failed round is FAILED.
sub medians
{
	my (%by, @order);
	for my $r (@{ $R{runs} })
	{
		my $k = rkey($r);
		push @order, $k unless $by{$k};
		push @{ $by{$k} }, $r;
	}
	my %med;
	for my $k (@order)
	{
		my @all = @{ $by{$k} };
		my @ok = sort { $a->{wall} <=> $b->{wall} } grep { $_->{check} eq 'ok' } @all;
		my @bad = grep { $_->{check} ne 'ok' } @all;
		my $m = @ok ? { %{ $ok[ floor(($#ok) / 2) ] } } : { %{ $all[0] } };
		$m->{rounds_ok} = scalar @ok;
		$m->{wall_min} = @ok ? $ok[0]{wall} : undef;
		$m->{wall_max} = @ok ? $ok[-1]{wall} : undef;
		$m->{check} = @bad ? $bad[0]{check} : 'ok';
		$m->{order} = scalar keys %med;
		$med{$k} = $m;
	}
	return \%med;
}

sub run_of
{
	my ($key, $round) = @_;
	my ($r) = grep { rkey($_) eq $key && $_->{round} == $round } @{ $R{runs} };
	return $r;
}

# ratio(label, num => key, den => [keys] (the fastest of them), field =>
# wall|stage|anon, goal => '<= x'): the median, smallest and largest of
# the ratios of one round's runs (variants of one round ran minutes apart
# at most, so a load that drifts over the run cancels out); the ratio of
# the medians when no round has them all.
sub ratio
{
	my ($med, %o) = @_;
	my $field = $o{field} // 'wall';
	my $get = sub {
		my ($r) = @_;
		return undef unless $r && $r->{check} eq 'ok';
		return $r->{mem}{worker_anon} if $field eq 'anon';
		# both sides' CPU seconds: over two cores, the shared mode's floor
		return $field eq 'cpu' ? ($r->{cpu_pg} // 0) + ($r->{cpu_ch} // 0) : $r->{$field};
	};
	my @keys = ($o{num}, @{ $o{den} });
	my @missing = grep { !$med->{$_} } @keys;
	my $x = { label => $o{label}, goal => $o{goal} // '' };
	if (@missing)
	{
		return if !$o{always};
		$x->{verdict} = 'not run';
		return $x;
	}
	my ($fail) = grep { $med->{$_}{check} ne 'ok' } @keys;
	if ($fail)
	{
		$x->{verdict} = $med->{$fail}{check} =~ /^not run/ ? 'not run' : 'FAILED';
		return $x;
	}
	my $num = $get->($med->{ $o{num} });
	my $den = min(map { $get->($med->{$_}) } @{ $o{den} });
	return $x unless defined $num && defined $den && $den > 0;
	$x->{value} = $num / $den;
	my @per;
	for my $round (0 .. $R{meta}{rounds} - 1)
	{
		my $n = $get->(run_of($o{num}, $round));
		my @d = grep { defined } map { $get->(run_of($_, $round)) } @{ $o{den} };
		push @per, $n / min(@d) if defined $n && @d == @{ $o{den} } && min(@d) > 0;
	}
	if (@per)
	{
		@per = sort { $a <=> $b } @per;
		($x->{round_min}, $x->{round_max}) = ($per[0], $per[-1]);
		$x->{value} = @per % 2 ? $per[ $#per / 2 ] : ($per[ @per / 2 - 1 ] + $per[ @per / 2 ]) / 2;
	}
	if ($x->{goal} =~ /^(<=|<) ([0-9.]+)$/)
	{
		$x->{verdict} = ($1 eq '<=' ? $x->{value} <= $2 : $x->{value} < $2) ? 'met' : 'missed';
	}
	return $x;
}

# The growth of the wall time per day of target from the smallest target
# to the largest, in ms, of dpwin and of the expert (medians): the value
# is dpwin's over the expert's.
sub growth
{
	my ($med, $p, $d, $x) = @_;
	my ($small, $large) = ($R{sizes}[0], $R{sizes}[-1]);
	return unless grep { $med->{$_} && $med->{$_}{check} eq 'ok' && defined $med->{$_}{wall} } @$d, @$x;
	return if grep { !$med->{$_} || $med->{$_}{check} ne 'ok' || !defined $med->{$_}{wall} } @$d, @$x;
	my ($gd, $gx) = map { 1000 * ($med->{ $_->[0] }{wall} - $med->{ $_->[1] }{wall}) / ($large - $small) } $d, $x;
	return { label => sprintf('%s: ms per day of target from %d to %d days, dpwin %.2f, expert %.2f; dpwin / expert',
			$p, $small, $large, $gd, $gx), value => $gx > 0 ? $gd / $gx : undef, goal => '' };
}

sub ratios
{
	my ($med) = @_;
	my @x;
	push @x, mode_ratios($med, $_) for @{ $R{modes} };
	my @sizes = @{ $R{sizes} };
	my ($small, $large) = ($sizes[0], $sizes[-1]);
	# the memory and skip_unchanged variants run in the first host mode of
	# each window size
	my (%seen, @first);
	for my $m (@{ $R{modes} }) { push @first, $m unless $seen{ mode_density($m) }++; }
	for my $mode (@first)
	{
		my $k = sub { join('|', $mode, @_) };
		my $ml = @first > 1 ? mode_label($mode) : '';
		my $mem = $k->('00:00', $large, 'day', "dpwin $R{mem_wdays}-day window");
		push @x, ratio($med, label => "${ml}worker RssAnon, $R{mem_wdays}-day / $R{wdays}-day window", num => $mem,
			den => [ $k->('00:00', $large, 'day', 'dpwin') ], field => 'anon', goal => '<= 1.25');
		push @x, ratio($med, label => "${ml}skip_unchanged: one day changed, with / without the option",
			num => $k->('00:00', $large, 'day', 'dpwin skip_unchanged'),
			den => [ $k->('00:00', $large, 'day', 'dpwin skip reference') ], goal => '<= 0.4',
			always => $mode eq $first[0] && ($R{meta}{only} // 'skip') =~ /\bskip\b/ ? 1 : 0);
	}
	push @x, backfill_ratios($med, $_) for @{ $R{modes} };
	if (grep { $_->{variant} =~ /^dpwin \d+-day window$/ && $_->{check} eq 'ok' } values %$med)
	{
		my $a = max(map { $_->{mem}{worker_anon} // 0 } grep { $_->{variant} =~ /^dpwin/ && $_->{mem} } @{ $R{runs} });
		push @x, { label => 'worker RssAnon, largest of every dpwin run (MB)', value => $a, goal => '< 16',
			verdict => $a < 16 ? 'met' : 'missed' };
	}
	return grep { defined } @x;
}

# Goal 9 in one mode, when the backfill variants ran in it: the backfill
# of N windows and the N single refreshes over one refresh of their span
# (medians of the rounds' ratios); then, from the medians, what each
# window beyond the first adds to the span's refresh (ms) and the
# statements in sequence of a window and of the span's refresh.
sub backfill_ratios
{
	my ($med, $mode) = @_;
	my $k = sub { join('|', $mode, '00:00', $R{sizes}[-1], 'day', @_) };
	my ($bf, $span, $singles) = map { $k->($_) } 'backfill', 'backfill span', 'backfill singles';
	return () unless $med->{$bf} || $med->{$span};
	my $n = $R{meta}{backfill_windows} || 10;
	my $ml = mode_label($mode);
	my @x = (ratio($med, label => "${ml}backfill of $n windows / one refresh of their span", num => $bf, den => [$span],
			goal => '<= 1.3', always => 1),
		ratio($med, label => "${ml}backfill singles ($n refreshes in a session) / one refresh of their span", num => $singles,
			den => [$span]),
		ratio($med, label => "${ml}backfill / backfill singles", num => $bf, den => [$singles]),
		ratio($med, label => "${ml}backfill / one refresh of their span, CPU seconds of both sides", num => $bf,
			den => [$span], field => 'cpu'));
	my $ok = sub { my $m = $med->{ $_[0] }; return $m && $m->{check} eq 'ok' && defined $m->{wall} ? $m : undef; };
	if ($n > 1 && $ok->($span))
	{
		for my $v ([ 'backfill', $bf ], [ 'backfill singles', $singles ])
		{
			my $m = $ok->($v->[1]) or next;
			push @x, { label => "${ml}$v->[0]: ms each window beyond the first adds to the span's refresh",
				value => 1000 * ($m->{wall} - $ok->($span)->{wall}) / ($n - 1), goal => '' };
		}
	}
	for my $v ([ 'backfill', $bf, $n ], [ 'backfill singles', $singles, $n ], [ 'backfill span', $span, 1 ])
	{
		my $m = $ok->($v->[1]);
		next unless $m && defined $m->{crit} && $m->{crit} ne '';
		push @x, { label => "${ml}$v->[0]: statements in sequence" . ($v->[2] > 1 ? ' per window' : ''),
			value => $m->{crit} / $v->[2], goal => '' };
	}
	return grep { defined } @x;
}

# The mode's prefix of ratio labels: none for the one mode of the runs
# before the modes ("shared/direct" alone).
sub mode_label { my ($mode) = @_; return @{ $R{modes} } == 1 && $mode eq 'shared/direct' ? '' : "$mode "; }

# A mode's window size ("r1000" of "shared/direct r1000"; '' with one size).
sub mode_density { my ($mode) = @_; return $mode =~ / (r[0-9]+)$/ ? $1 : ''; }

# The modes of a run: host mode / round trip, and the window size when the
# run has several (bench.pl's mode_keys()).
sub run_modes
{
	my ($hosts, $rtts, $rpds) = @_;
	my @m = map { my $h = $_; map { "$h/$_" } @$rtts } @$hosts;
	return @m if @$rpds < 2;
	return map { my $d = $_; map { "$_ r$d" } @m } @$rpds;
}

# The ratios of one mode (hosts/round trip).  The goals of issue 19 apply
# to every mode: dpwin / expert <= 1.0 on 30-day targets, and dpwin /
# serial COPY <= 1.5 when shared.
sub mode_ratios
{
	my ($med, $mode) = @_;
	my @x;
	my @sizes = @{ $R{sizes} };
	my ($small, $large) = ($sizes[0], $sizes[-1]);
	my $k = sub { join('|', $mode, @_) };
	my $ml = mode_label($mode);
	for my $e (@{ $R{ends} })
	{
		my $cs = $k->($e, '', '', 'copy serial');
		my $cp = $k->($e, '', '', 'copy parallel');
		for my $n (@sizes)
		{
			for my $s (@{ $R{shapes} })
			{
				my ($d, $nv, $ex) = map { $k->($e, $n, $s, $_) } qw(dpwin naive expert);
				my $p = "$ml$e $s $n-day:";
				my $g30 = $n == 30;
				push @x, ratio($med, label => "$p dpwin / naive peer", num => $d, den => [$nv]);
				push @x, ratio($med, label => "$p dpwin / expert peer", num => $d, den => [$ex],
					goal => $g30 || $n == 1000 ? '<= 1.0' : undef);
				push @x, ratio($med, label => "$p dpwin / faster peer", num => $d, den => [ $nv, $ex ]);
				push @x, ratio($med, label => "$p dpwin / serial COPY of the window", num => $d, den => [$cs],
					goal => $g30 && $mode =~ /^shared/ ? '<= 1.5' : undef);
				push @x, ratio($med, label => "$p dpwin / parallel COPY (source limit)", num => $d, den => [$cp]);
				push @x, ratio($med, label => "$p dpwin again (on its own last generation) / dpwin",
					num => $k->($e, $n, $s, 'dpwin again'), den => [$d]);
			}
		}
		for my $s (@{ $R{shapes} })
		{
			next if $small == $large;
			push @x, ratio($med, label => "$ml$e $s: dpwin $large-day / $small-day target", num => $k->($e, $large, $s, 'dpwin'),
				den => [ $k->($e, $small, $s, 'dpwin') ]);
			push @x, growth($med, "$ml$e $s", map { [ $k->($e, $large, $s, $_), $k->($e, $small, $s, $_) ] } qw(dpwin expert));
		}
		for my $s (@{ $R{shapes} })
		{
			my $d = $k->($e, $small, $s, 'dpwin');
			push @x, ratio($med, label => "$ml$e $s $small-day: dpwin extraction (stage) / parallel COPY (source limit)",
				num => $d, den => [$cp], field => 'stage');
			push @x, ratio($med, label => "$ml$e $s $small-day: dpwin extraction (stage) / parallel sink limit",
				num => $d, den => [ $k->($e, '', $s, 'sink parallel') ], field => 'stage');
			push @x, ratio($med, label => "$ml$e $s: parallel / serial sink", num => $k->($e, '', $s, 'sink parallel'),
				den => [ $k->($e, '', $s, 'sink serial') ]);
		}
		push @x, ratio($med, label => "$ml$e: parallel / serial COPY", num => $cp, den => [$cs]);
	}
	return @x;
}

sub fmt { my ($f, $v) = @_; return defined $v && $v ne '' ? sprintf($f, $v) : ''; }

sub text_table
{
	my ($med, $ratios) = @_;
	my $m = $R{meta};
	my $t = sprintf("dpwin benchmark, %s; %s rows/day, source %s days, %s-day window, parallelism %s, %s-day chunks, dpwin's targets %s, median of %s rounds;"
		  . " %d CPUs; load average at start %s, at end %s; %s s\n",
		$m->{started}, $m->{rows_per_day}, $m->{source_days}, $m->{window_days}, $m->{parallelism}, $m->{chunk_days} // 1,
		$m->{target} // 'fresh', $m->{rounds},
		$m->{cpus}, $m->{load_start}, $m->{load_end}, $m->{run_seconds});
	$t .= "window rows: " . join(', ', map { "end $_: $R{window_rows}{$_}" } sort keys %{ $R{window_rows} }) . "\n\n";
	my @h = ([ 'mode', '%-13s' ], [ 'end', '%-5s' ], [ 'days', '%4s' ], [ 'shape', '%-5s' ], [ 'variant', '%-22s' ], [ 'wall_s', '%7s' ],
		[ 'min', '%6s' ], [ 'max', '%6s' ], [ 'stage', '%6s' ], [ 'build', '%6s' ], [ 'verify', '%6s' ],
		[ 'publish', '%7s' ], [ 'other', '%6s' ], [ 'anon_MB', '%7s' ], [ 'hwm_MB', '%6s' ], [ 'cloned', '%6s' ],
		[ 'cpu_pg', '%6s' ], [ 'cpu_ch', '%6s' ], [ 'stmts', '%5s' ], [ 'in_seq', '%6s' ], [ 'check', '%s' ]);
	$t .= join(' ', map { sprintf($_->[1], $_->[0]) } @h) . "\n";
	for my $r (sort { $a->{order} <=> $b->{order} } values %$med)
	{
		my @v = ($r->{mode} // 'shared/direct', $r->{end}, $r->{days} // '', $r->{shape} // '', $r->{variant}, fmt('%.3f', $r->{wall}),
			fmt('%.2f', $r->{wall_min}), fmt('%.2f', $r->{wall_max}), fmt('%.2f', $r->{stage}), fmt('%.2f', $r->{build}),
			fmt('%.2f', $r->{verify}), fmt('%.3f', $r->{publish}), fmt('%.2f', $r->{other}),
			$r->{mem} ? $r->{mem}{worker_anon} // '' : '', $r->{mem} ? $r->{mem}{worker_hwm} // '' : '',
			$r->{cloned} // '', fmt('%.2f', $r->{cpu_pg}), fmt('%.2f', $r->{cpu_ch}), $r->{stmts} // '', $r->{crit} // '',
			$r->{check});
		$t .= join(' ', map { sprintf($h[$_][1], $v[$_]) } 0 .. $#h) . "\n";
	}
	$t .= "\n";
	for my $x (@$ratios)
	{
		$t .= sprintf("%-78s %7s  [%s .. %s]  %-8s %s\n", $x->{label}, fmt('%.3f', $x->{value}),
			fmt('%.3f', $x->{round_min}), fmt('%.3f', $x->{round_max}), $x->{goal}, $x->{verdict} // '');
	}
	return $t;
}

# The tables of --markdown: each mode's medians and ratios, in Markdown.
sub markdown_tables
{
	my ($med, $ratios) = @_;
	my %rx = map { $_->{label} => $_ } @$ratios;
	my $mode = $R{modes}[0];
	my $ml = '';
	my $w = sub { my $m = $med->{ join('|', $mode, @_) }; return !$m ? '' : $m->{check} ne 'ok' ? 'FAILED' : sprintf('%.2f', $m->{wall}); };
	my $r = sub {
		my $x = $rx{ $_[0] } or return '';
		return $x->{verdict} // '' unless defined $x->{value};
		my $v = sprintf('%.2f', $x->{value});
		return $x->{verdict} && $x->{verdict} =~ /^(met|missed)$/ ? "$v $x->{verdict}" : $v;
	};
	my $t = modes_table($med, \%rx);
	for my $m (@{ $R{modes} })
	{
	$mode = $m;
	$ml = mode_label($m);
	for my $e (@{ $R{ends} })
	{
		$t .= "${ml}Window ending $e; seconds, medians of $R{meta}{rounds} rounds; ratios: medians of the rounds' ratios.\n\n";
		$t .= "| target | dpwin | naive | expert | serial COPY | parallel COPY | dpwin / faster peer | dpwin / expert | dpwin / serial COPY |\n";
		$t .= "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
		for my $n (@{ $R{sizes} })
		{
			for my $s (@{ $R{shapes} })
			{
 				my $p = "$ml$e $s $n-day:";
				$t .= "| $s, $n days | " . join(' | ', (map { $w->($e, $n, $s, $_) } qw(dpwin naive expert)),
					$w->($e, '', '', 'copy serial'), $w->($e, '', '', 'copy parallel'),
					$r->("$p dpwin / faster peer"), $r->("$p dpwin / expert peer"),
					$r->("$p dpwin / serial COPY of the window")) . " |\n";
			}
		}
		$t .= "\n";
	}
	}
	$mode = $R{modes}[0];
	$ml = mode_label($mode);
	$t .= "| window end | shape | dpwin 300-day / 30-day | dpwin stage / parallel COPY | dpwin stage / parallel sink | sink serial | sink parallel |\n";
	$t .= "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
	my ($small, $large) = ($R{sizes}[0], $R{sizes}[-1]);
	for my $e (@{ $R{ends} })
	{
		for my $s (@{ $R{shapes} })
		{
			$t .= "| $e | $s | " . join(' | ', $r->("$ml$e $s: dpwin $large-day / $small-day target"),
				$r->("$ml$e $s $small-day: dpwin extraction (stage) / parallel COPY (source limit)"),
				$r->("$ml$e $s $small-day: dpwin extraction (stage) / parallel sink limit"),
				$w->($e, '', $s, 'sink serial'), $w->($e, '', $s, 'sink parallel')) . " |\n";
		}
	}
	$t .= "\n";
	for my $x (grep { $_->{label} =~ /RssAnon|skip_unchanged|backfill/ } @$ratios)
	{
		$t .= "- $x->{label}: " . (!defined $x->{value} ? $x->{verdict} // ''
			  : sprintf('%.3f', $x->{value}) . ($x->{goal} ? " ($x->{goal}: $x->{verdict})" : '')) . "\n";
	}
	return $t;
}

# Every mode side by side on the smallest targets: the ratios, the
# statements the endpoint received (in sequence / all) and the CPU seconds
# of each side (PostgreSQL / ClickHouse), medians of the rounds.
sub modes_table
{
	my ($med, $rx) = @_;
	my $n = $R{sizes}[0];
	my $t = "| hosts / RTT ms | end | $n-day target | dpwin s | expert s | serial COPY s | dpwin / expert | dpwin / serial COPY"
	  . " | dpwin statements in sequence / all | expert | dpwin CPU s PG / CH | expert | serial COPY |
";
	$t .= "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
";
	my $mcol = sub {
		my ($key, $f) = @_;
		my @ok = grep { rkey($_) eq $key && $_->{check} eq 'ok' && defined $_->{$f} && $_->{$f} ne '' } @{ $R{runs} };
		return undef unless @ok;
		my @v = sort { $a <=> $b } map { $_->{$f} } @ok;
		return @v % 2 ? $v[ $#v / 2 ] : ($v[ @v / 2 - 1 ] + $v[ @v / 2 ]) / 2;
	};
	for my $mode (@{ $R{modes} })
	{
		my $ml = mode_label($mode);
		for my $e (@{ $R{ends} })
		{
			for my $s (@{ $R{shapes} })
			{
				my ($d, $x, $c) = map { join('|', $mode, $e, @$_) } [ $n, $s, 'dpwin' ], [ $n, $s, 'expert' ], [ '', '', 'copy serial' ];
				my $w = sub { my $m = $med->{ $_[0] }; return !$m ? '' : $m->{check} ne 'ok' ? 'FAILED' : sprintf('%.2f', $m->{wall}); };
				my $r = sub {
					my $y = $rx->{ $_[0] } or return '';
					return $y->{verdict} // '' unless defined $y->{value};
					return sprintf('%.2f', $y->{value}) . ($y->{verdict} && $y->{verdict} =~ /^(met|missed)$/ ? " $y->{verdict}" : '');
				};
				my $st = sub { my ($k) = @_; my ($a, $b) = ($mcol->($k, 'crit'), $mcol->($k, 'stmts')); return defined $a ? sprintf('%g / %g', $a, $b) : ''; };
				my $cpu = sub { my ($k) = @_; my ($a, $b) = ($mcol->($k, 'cpu_pg'), $mcol->($k, 'cpu_ch')); return defined $a ? sprintf('%.2f / %.2f', $a, $b) : ''; };
				my ($h, $rtt) = split m{/}, $mode;
				$t .= "| $h / $rtt | $e | $s | " . join(' | ', $w->($d), $w->($x), $w->($c),
					$r->("$ml$e $s $n-day: dpwin / expert peer"), $r->("$ml$e $s $n-day: dpwin / serial COPY of the window"),
					$st->($d), $st->($x), $cpu->($d), $cpu->($x), $cpu->($c)) . " |\n";
			}
		}
	}
	return "$t\n";
}

sub csvq
{
	my ($v) = @_;
	return '' unless defined $v;
	return $v unless $v =~ /[",\n]/;
	$v =~ s/"/""/g;
	return "\"$v\"";
}

my @csv_cols = qw(record round window_end target_days shape variant parallelism rows bytes wall_s wall_min_s wall_max_s
  stage_s build_s verify_s publish_s other_s coordinator_vmhwm_mb worker_vmhwm_mb worker_rssanon_mb worker_rssshmem_mb
  cloned_partitions check label value round_min round_max goal verdict hosts rtt_ms cpu_pg_s cpu_ch_s statements
  statements_in_sequence rows_per_day);

sub csv_cols { return @csv_cols; }

sub csv_row
{
	my (%f) = @_;
	return join(',', map { csvq($f{$_}) } @csv_cols) . "\n";
}

sub run_fields
{
	my ($rec, $r) = @_;
	my $n3 = sub { defined $_[0] && $_[0] ne '' ? sprintf('%.4f', $_[0]) : undef };
	return (record => $rec, round => $rec eq 'run' ? $r->{round} : undef, window_end => $r->{end},
		target_days => $r->{days}, shape => $r->{shape}, variant => $r->{variant}, parallelism => $r->{par},
		rows => $r->{rows}, bytes => $r->{bytes}, wall_s => $n3->($r->{wall}),
		wall_min_s => $rec eq 'median' ? $n3->($r->{wall_min}) : undef,
		wall_max_s => $rec eq 'median' ? $n3->($r->{wall_max}) : undef,
		stage_s => $n3->($r->{stage}), build_s => $n3->($r->{build}), verify_s => $n3->($r->{verify}),
		publish_s => $n3->($r->{publish}), other_s => $n3->($r->{other}),
		coordinator_vmhwm_mb => $r->{mem} && $r->{mem}{coord_hwm}, worker_vmhwm_mb => $r->{mem} && $r->{mem}{worker_hwm},
		worker_rssanon_mb => $r->{mem} && $r->{mem}{worker_anon}, worker_rssshmem_mb => $r->{mem} && $r->{mem}{worker_shmem},
		cloned_partitions => $r->{cloned}, check => $r->{check}, hosts => $r->{hosts}, rtt_ms => $r->{rtt},
		cpu_pg_s => $n3->($r->{cpu_pg}), cpu_ch_s => $n3->($r->{cpu_ch}), statements => $r->{stmts},
		statements_in_sequence => $r->{crit}, rows_per_day => $r->{rows_per_day});
}

sub write_csv
{
	my ($path, $med, $ratios) = @_;
	make_path(dirname($path));
	open my $f, '>', $path or die "$path: $!";
	print $f join(',', @csv_cols), "\n";
	print $f csv_row(record => 'meta', label => $_, value => $R{meta}{$_}) for sort keys %{ $R{meta} };
	print $f csv_row(record => 'window', window_end => $_, rows => $R{window_rows}{$_}) for sort keys %{ $R{window_rows} };
	for my $t (sort keys %{ $R{tables} })
	{
		my $s = $R{tables}{$t};
		print $f csv_row(record => 'table', label => $t, rows => $s->{rows}, bytes => $s->{bytes}, value => $s->{partitions});
	}
	print $f csv_row(run_fields('run', $_)) for @{ $R{runs} };
	print $f csv_row(run_fields('median', $_)) for sort { $a->{order} <=> $b->{order} } values %$med;
	for my $x (@$ratios)
	{
		my %v = map { ($_ => defined $x->{$_} ? sprintf('%.4f', $x->{$_}) : undef) } qw(value round_min round_max);
		print $f csv_row(record => 'ratio', label => $x->{label}, %v, goal => $x->{goal}, verdict => $x->{verdict});
	}
	close $f;
}

sub bench_report
{
	%R = @_;
	if (!$R{meta}{commit})
	{
		$R{meta}{cpus} = do { my $n = 0; open my $f, '<', '/proc/cpuinfo'; while (<$f>) { $n++ if /^processor\s*:/ } $n };
		my $commit = `git -C '$R{root}' rev-parse --short HEAD 2>/dev/null` // '';
		chomp $commit;
		my $dirty = `git -C '$R{root}' status --porcelain --untracked-files=no -- src 2>/dev/null` // '';
		$R{meta}{commit} = $commit . ($dirty ne '' ? ' (src modified)' : '');
	}
	my $med = medians();
	my @ratios = ratios($med);
	my $table = text_table($med, \@ratios);
	print $R{markdown} ? markdown_tables($med, \@ratios) : "\n$table";
	if ($R{out})
	{
		open my $txt, '>', "$R{out}/results.txt" or die;
		print $txt $table;
		close $txt;
		write_csv("$R{out}/results.csv", $med, \@ratios);
	}
	write_csv($R{csv}, $med, \@ratios) if $R{csv};
	printf STDERR "bench: wrote %s\n", join(' and ', ($R{out} ? ("$R{out}/results.txt", "$R{out}/results.csv") : ()),
		$R{csv} // ());
}

# ---- the table again from a results CSV ------------------------------------------

sub csv_split
{
	my ($line) = @_;
	chomp $line;
	my @f;
	while ($line =~ /\G(?:"((?:[^"]|"")*)"|([^,]*))(,|$)/g)
	{
		my $v = defined $1 ? $1 =~ s/""/"/gr : $2;
		push @f, $v;
		last if $3 eq '';
	}
	return @f;
}

# perl test/bench/report.pl [--markdown] RESULTS.csv [OUT.csv]: the
# medians, ratios and table of the runs a results CSV holds, computed by
# this version of the report (to compare a committed CSV with a newer
# one).  --markdown prints the tables in Markdown.
sub nz { my ($v, $d) = @_; return defined $v && $v ne '' ? $v : $d; }

sub report_from_csv
{
	my $markdown = @_ && $_[0] eq '--markdown' ? shift : undef;
	my ($in, $outcsv) = @_;
	die "usage: perl test/bench/report.pl [--markdown] RESULTS.csv [OUT.csv]\n" unless $in;
	open my $f, '<', $in or die "$in: $!\n";
	my @head = csv_split(scalar <$f>);
	my (%meta, %wrows, %tables, @runs);
	while (my $l = <$f>)
	{
		my %r;
		@r{@head} = csv_split($l);
		if ($r{record} eq 'meta') { $meta{ $r{label} } = $r{value}; }
		elsif ($r{record} eq 'window') { $wrows{ $r{window_end} } = $r{rows}; }
		elsif ($r{record} eq 'table') { $tables{ $r{label} } = { rows => $r{rows}, bytes => $r{bytes}, partitions => $r{value} }; }
		elsif ($r{record} eq 'run')
		{
			my %mem = (coord_hwm => $r{coordinator_vmhwm_mb}, worker_hwm => $r{worker_vmhwm_mb},
				worker_anon => $r{worker_rssanon_mb}, worker_shmem => $r{worker_rssshmem_mb});
			push @runs, { round => $r{round}, end => $r{window_end}, days => $r{target_days}, shape => $r{shape},
				variant => $r{variant}, par => $r{parallelism}, rows => $r{rows}, bytes => $r{bytes},
				wall => $r{wall_s} eq '' ? undef : $r{wall_s}, stage => $r{stage_s}, build => $r{build_s},
				verify => $r{verify_s}, publish => $r{publish_s}, other => $r{other_s}, cloned => $r{cloned_partitions},
				check => $r{check}, ($r{worker_rssanon_mb} ne '' ? (mem => \%mem) : ()),
				hosts => nz($r{hosts}, 'shared'), rtt => nz($r{rtt_ms}, 'direct'),
				mode => nz($r{hosts}, 'shared') . '/' . nz($r{rtt_ms}, 'direct')
				  . (@{ [ split ' ', nz($meta{rows_per_day}, '') ] } > 1 ? " r$r{rows_per_day}" : ''),
				rows_per_day => $r{rows_per_day},
				cpu_pg => $r{cpu_pg_s}, cpu_ch => $r{cpu_ch_s}, stmts => $r{statements}, crit => $r{statements_in_sequence} };
		}
	}
	close $f;
	bench_report(runs => \@runs, meta => \%meta, window_rows => \%wrows, tables => \%tables,
		sizes => [ split ' ', $meta{sizes} ], shapes => [ split ' ', $meta{shapes} ], ends => [ split ' ', $meta{ends} ],
		modes => [ run_modes([ split ' ', nz($meta{hosts}, 'shared') ], [ split ' ', nz($meta{rtt_ms}, 'direct') ],
				[ split ' ', nz($meta{rows_per_day}, '') ]) ],
		root => File::Spec->rel2abs(dirname(__FILE__) . '/../..'),
		par => $meta{parallelism}, wdays => $meta{window_days}, mem_wdays => $meta{memory_window_days}, csv => $outcsv,
		markdown => $markdown);
}

report_from_csv(@ARGV) unless caller;

1;
