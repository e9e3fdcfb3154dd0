#!/usr/bin/env perl
#
# test/bench/floors.pl — the least wall time the CPU a variant spends
# allows on the benchmark's cores, beside the wall time it took
# (docs/benchmark.md, "What bounds each figure").
#
#   perl test/bench/floors.pl docs/bench/results-X.csv [...]
#
# For each results file, each host mode and round trip, each target size
# and each variant, over the checked runs of every shape and window end:
# the medians of the wall time and of the CPU seconds of each side
# (PostgreSQL: the postmaster and every process it started; ClickHouse:
# the endpoint's process), and the CPU floor:
#
#   shared  (PostgreSQL + ClickHouse) / 2: both sides on the two cores
#   split   the larger of the two: each side on its one core
#
# then, for dpwin, its floor and its wall time over each comparator's wall
# time.  A floor ratio over a goal's bound means that no schedule of the
# same work on these cores meets it: only less work would.  The CPU of the
# benchmark's own client (and of psql for the COPY limits) is in neither.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use BenchStats qw(median);

for my $file (@ARGV)
{
	open my $f, '<', $file or die "$file: $!";
	my $head = <$f>;
	chomp $head;
	my @cols = split /,/, $head;
	my %g;
	while (my $line = <$f>)
	{
		chomp $line;
		next unless $line =~ /^run,/;
		# The run records hold no quoted commas.
		my %r;
		@r{@cols} = split /,/, $line, -1;
		next unless ($r{check} // '') eq 'ok' && ($r{cpu_pg_s} // '') ne '';
		my $size = $r{target_days} eq '' ? 'window' : "$r{target_days}-day";
		my $k = join '|', $r{hosts} || 'shared', $r{rtt_ms} eq '' ? 0 : $r{rtt_ms};
		push @{ $g{$k}{$r{variant}}{$size} }, \%r;
	}
	close $f;
	print "== $file\n";
	for my $k (sort keys %g)
	{
		my ($hosts, $rtt) = split /\|/, $k;
		$rtt .= ' ms' if $rtt =~ /^\d+$/;
		my %m;
		printf "%s / %s\n  %-15s %-8s %4s %7s %7s %7s %7s %6s\n", $hosts, $rtt,
		  'variant', 'target', 'runs', 'wall s', 'PG s', 'CH s', 'floor s', 'used';
		for my $v (sort keys %{ $g{$k} })
		{
			for my $size (sort keys %{ $g{$k}{$v} })
			{
				my $rs = $g{$k}{$v}{$size};
				my ($w, $pg, $ch) = map { my $c = $_; median(map { $_->{$c} } @$rs) } qw(wall_s cpu_pg_s cpu_ch_s);
				my $floor = $hosts eq 'split' ? ($pg > $ch ? $pg : $ch) : ($pg + $ch) / 2;
				$m{$v}{$size} = { wall => $w, floor => $floor };
				printf "  %-15s %-8s %4d %7.3f %7.3f %7.3f %7.3f %5.0f%%\n", $v, $size, scalar @$rs, $w, $pg, $ch,
				  $floor, 100 * $floor / $w;
			}
		}
		for my $size (sort grep { $_ ne 'window' } keys %{ $m{dpwin} // {} })
		{
			my $d = $m{dpwin}{$size};
			for my $c ([ 'expert', $m{expert}{$size} ], [ 'serial COPY', $m{'copy serial'}{window} ],
				[ 'parallel COPY', $m{'copy parallel'}{window} ])
			{
				next unless $c->[1];
				printf "  dpwin %s / %-13s  wall %.2f  floor %.2f\n", $size, $c->[0], $d->{wall} / $c->[1]{wall},
				  $d->{floor} / $c->[1]{wall};
			}
		}
	}
	print "\n";
}
