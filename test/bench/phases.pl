#!/usr/bin/perl
#
# test/bench/phases.pl — a dpwin refresh phase by phase, from the
# statements the endpoint received (docs/benchmark.md, "The window's and
# the target's sizes").
#
#   perl test/bench/phases.pl RESULTS.csv test/bench/out/statements/*_day_30_dpwin_r*.tsv
#
# For each statement file of a dpwin refresh (bench.pl writes one per
# variant and round: arrival and answer in ms from the session's start)
# it finds the phases by their statements and prints, as medians over the
# files, when each phase starts and ends and how long it lasts.  The
# phases overlap: the probe, the clone and its checks run in the
# coordinator while the chunk workers move the rows.  RESULTS.csv (the
# run's results file) gives each refresh's wall time, for the time after
# its last answer (evidence, route state, the result row); files of
# other runs are read without it.  Files of the peers print their
# statements' spans by kind.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use BenchStats qw(median);
use List::Util qw(min max sum);

my $csv = shift @ARGV;
die "usage: perl test/bench/phases.pl RESULTS.csv STATEMENTS.tsv ...\n" unless $csv && @ARGV;

# The wall time of every run of the results file, by its statement file's
# name (bench.pl's target_variant() names them so).
my %wall;
if (open my $f, '<', $csv)
{
	my @head = split /,/, scalar <$f>;
	chomp @head;
	while (my $l = <$f>)
	{
		chomp $l;
		my %r;
		@r{@head} = split /,/, $l;
		next unless ($r{record} // '') eq 'run' && defined $r{wall_s} && $r{wall_s} ne '';
		my $mode = ($r{hosts} || 'shared') . '/' . ($r{rtt_ms} || 'direct');
		for my $m ($mode, "$mode r" . ($r{rows_per_day} // ''))
		{
			(my $n = "$m $r{window_end} $r{shape}_$r{target_days} $r{variant} r$r{round}") =~ s/[^A-Za-z0-9_.-]+/_/g;
			$wall{$n} = $r{wall_s} * 1000;
		}
	}
}

my @phases = (
	[ 'first statement (the caller\'s wait, the coordinator\'s start)', sub { (0, $_[0]{first}) } ],
	[ 'admission (server, target)', sub { span($_[0], qr/^SELECT version\(\)|^SELECT 'D', engine/, 'first2') } ],
	[ 'admission\'s answer to the first chunk statement (snapshot, workers)', sub { my $s = $_[0]; ($s->{admitted}, $s->{worker0}) } ],
	[ 'EXCHANGE probe', sub { span($_[0], qr/_probe_|^SELECT engine FROM system\.databases/) } ],
	[ 'generation: CREATE, its check', sub { span($_[0], qr/_gen`? AS |^SELECT \* FROM \(SELECT name AS t, 'T'.*_gen'/, 'before_rows_end') } ],
	[ 'the target\'s partitions by minmax', sub { span($_[0], qr/__dpwin_p/) } ],
	[ 'clone: ATTACH PARTITION ... FROM the target', sub { span($_[0], qr/^ALTER TABLE .*_gen` ATTACH PARTITION ID .* FROM `[^`]+`\.`(?!_dpwin_)/) } ],
	[ 'clone\'s checks: parts, counts, the baseline', sub { my $s = $_[0]; ($s->{cloned}, $s->{checked}) } ],
	[ 'the rows: first chunk statement to the last staging digest', sub { my $s = $_[0]; ($s->{worker0}, $s->{rows_end}) } ],
	[ 're-admission', sub { span($_[0], qr/^SELECT 'D', engine/, 'last') } ],
	[ 'the staging tables\' copies check', sub { span($_[0], qr/^SELECT \* FROM \(SELECT name AS t, 'T'.*_stg_/) } ],
	[ 'ATTACH of the staged parts, the parts after it', sub { my $s = $_[0]; ($s->{attach}, $s->{attached}) } ],
	[ 'EXCHANGE, UUIDs, clean-up, backup RENAME', sub { my $s = $_[0]; ($s->{exchange}, $s->{end}) } ],
	[ 'last answer to the end (evidence, route state, result)', sub { my $s = $_[0]; defined $s->{wall} ? ($s->{end}, $s->{wall}) : () } ],
);

# [start, end] of the statements matching $re: all of them, or only the
# first (or last) one.
sub span
{
	my ($s, $re, $which) = @_;
	my @m = grep { $_->{text} =~ $re } @{ $s->{st} };
	return () unless @m;
	if (($which // '') eq 'first2') { @m = grep { $_->{text} !~ /^SELECT 'D'/ || $_ == (grep { $_->{text} =~ /^SELECT 'D'/ } @m)[0] } @m; }
	@m = ($m[-1]) if ($which // '') eq 'last';
	@m = grep { $_->{arr} < $s->{rows_end} } @m if ($which // '') eq 'before_rows_end';
	return () unless @m;
	return (min(map { $_->{arr} } @m), max(map { $_->{ans} } @m));
}

my (%start, %end, %len, @chunk, $n);
my %peer;
for my $file (@ARGV)
{
	open my $f, '<', $file or die "$file: $!\n";
	my @st;
	while (my $l = <$f>)
	{
		next if $l =~ /^#/;
		chomp $l;
		my ($arr, $ans, undef, undef, $text) = split /\t/, $l, 5;
		$text //= '';
		next if $text =~ / SYNC$/ || $text eq 'SELECT 1';
		push @st, { arr => $arr, ans => $ans, text => $text };
	}
	close $f;
	next unless @st;
	(my $name = $file) =~ s{^.*/}{};
	$name =~ s/\.tsv$//;
	if ($name !~ /_dpwin_r[0-9]+$/)
	{
		# a peer: its statements in order
		my $v = $name =~ /_(expert|naive)_r[0-9]+$/ ? $1 : 'other';
		push @{ $peer{$v}{$_->[0]} }, $_->[1] for map { [ $_, $st[$_]{ans} - $st[$_]{arr} ] } 0 .. $#st;
		push @{ $peer{$v}{total} }, max(map { $_->{ans} } @st);
		next;
	}
	my %s = (st => \@st, wall => $wall{$name});
	$s{first} = min(map { $_->{arr} } @st);
	$s{end} = max(map { $_->{ans} } @st);
	my @w = grep { $_->{text} =~ /_stg_/ && $_->{text} !~ /^(ALTER|DROP|SELECT partition_id|SELECT \* FROM)/ } @st;
	my @dg = grep { $_->{text} =~ /sipHash128ReferenceKeyed|sipHash64Keyed/ && $_->{text} =~ /_stg_/ } @st;
	next unless @w;
	$s{worker0} = min(map { $_->{arr} } @w);
	$s{rows_end} = max(map { $_->{ans} } @w, @dg);
	my ($admit) = grep { $_->{text} =~ /^SELECT 'D', engine/ } @st;
	$s{admitted} = $admit ? $admit->{ans} : $s{first};
	my @clone = grep { $_->{text} =~ /^ALTER TABLE .*_gen` ATTACH PARTITION ID .* FROM `[^`]+`\.`(?!_dpwin_)/ } @st;
	my ($readmit) = reverse grep { $_->{text} =~ /^SELECT 'D', engine/ } @st;
	$s{cloned} = @clone ? max(map { $_->{ans} } @clone) : undef;
	my @chk = grep { defined $s{cloned} && $_->{arr} >= $s{cloned} && $_->{arr} < $readmit->{arr}
		  && $_->{text} !~ /_stg_/ && $_->{text} !~ /sipHash/ } @st;
	$s{checked} = @chk ? max(map { $_->{ans} } @chk) : $s{cloned};
	my ($att) = grep { $_->{text} =~ /^ALTER TABLE .* ATTACH PARTITION .*_stg_/ } @st;
	my ($exch) = reverse grep { $_->{text} =~ /^EXCHANGE TABLES/ } @st;
	$s{attach} = $att ? $att->{arr} : undef;
	my @after_att = grep { $att && $_->{arr} >= $att->{arr} && $exch && $_->{arr} < $exch->{arr} } @st;
	$s{attached} = @after_att ? max(map { $_->{ans} } @after_att) : undef;
	$s{exchange} = $exch ? $exch->{arr} : undef;
	# each chunk's conversation: its CREATE's arrival to its digest's answer
	my %c;
	for my $x (grep { $_->{text} =~ /_stg_([0-9]+)_[0-9]+`/ } @st)
	{
		my ($no) = $x->{text} =~ /_stg_([0-9]+)_[0-9]+`/;
		next if $x->{text} =~ /^(ALTER|DROP|SELECT partition_id|SELECT \* FROM)/;
		$c{$no}{from} = min($c{$no}{from} // 1e9, $x->{arr});
		$c{$no}{to} = max($c{$no}{to} // -1e9, $x->{ans});
	}
	push @chunk, map { $_->{to} - $_->{from} } values %c;
	for my $p (@phases)
	{
		my ($a, $b) = $p->[1]->(\%s);
		next unless defined $a && defined $b;
		push @{ $start{ $p->[0] } }, $a;
		push @{ $end{ $p->[0] } }, $b;
		push @{ $len{ $p->[0] } }, $b - $a;
	}
	$n++;
}
if ($n)
{
	printf "%d dpwin refreshes; ms from the session's start, medians (phases overlap)\n", $n;
	printf "  %-70s %7s %7s %7s\n", 'phase', 'from', 'to', 'ms';
	for my $p (@phases)
	{
		my $k = $p->[0];
		next unless $len{$k};
		printf "  %-70s %7.0f %7.0f %7.0f\n", $k, median(@{ $start{$k} }), median(@{ $end{$k} }), median(@{ $len{$k} });
	}
	printf "  %-70s %7s %7s %7.0f\n", 'one chunk: its CREATE to its digest\'s answer (median of all chunks)', '', '', median(@chunk)
	  if @chunk;
}
for my $v (sort keys %peer)
{
	my @k = sort { $a <=> $b } grep { /^[0-9]+$/ } keys %{ $peer{$v} };
	printf "%s: %d statements, each's ms (medians): %s; last answer %.0f ms\n", $v, scalar @k,
	  join(' ', map { sprintf('%.0f', median(@{ $peer{$v}{$_} })) } @k), median(@{ $peer{$v}{total} });
}
