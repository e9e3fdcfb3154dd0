#!/usr/bin/perl
#
# test/bench/insert_gaps.pl — what lies between a chunk worker's INSERTs,
# from the benchmark's statement files of dpwin's refreshes
# (test/bench/out/statements/*_dpwin_r*.tsv: arrival and answer in ms from
# the variant's start, then the statement).
#
# For every chunk c whose worker went on to chunk c + 2 (two workers take
# the chunks in turn), prints the ms from the answer to c's INSERT to the
# arrival of the next chunk's CREATE and INSERT and the CREATE's own time;
# then, per file, the median gap and how long the staging digests took
# (the files keep a statement's first 300 characters, which do not name a
# digest's table).
#
#   perl test/bench/insert_gaps.pl FILE...
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use BenchStats qw(median);

for my $f (@ARGV)
{
	open my $fh, '<', $f or die "$f: $!";
	my (%ins, %cre, @dg);
	while (my $l = <$fh>)
	{
		next if $l =~ /^#/;
		chomp $l;
		my ($at, $ans, undef, undef, $q) = split /\t/, $l, 5;
		next unless defined $q;
		if ($q =~ /^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash128/) { push @dg, $ans - $at; next; }
		next unless $q =~ /_stg_(\d+)_0`/;
		my $c = $1;
		if ($q =~ /^INSERT INTO /) { $ins{$c} = [ $at, $ans ]; }
		elsif ($q =~ /^CREATE TABLE /) { $cre{$c} = [ $at, $ans ]; }
	}
	close $fh;
	print "== $f\n";
	print "  chunk  answer->CREATE  CREATE  CREATE->INSERT  answer->next INSERT\n";
	my @gap;
	for my $c (sort { $a <=> $b } keys %ins)
	{
		my $n = $c + 2;
		next unless $ins{$n} && $cre{$n};
		my $gap = $ins{$n}[0] - $ins{$c}[1];
		push @gap, $gap;
		printf "  %d->%d  %14.0f  %6.0f  %14.0f  %19.0f\n", $c, $n,
		  $cre{$n}[0] - $ins{$c}[1], $cre{$n}[1] - $cre{$n}[0], $ins{$n}[0] - $cre{$n}[1], $gap;
	}
	my @sorted = sort { $a <=> $b } @dg;
	if (@gap && @dg)
	{
		printf "  medians: answer->next INSERT %.0f ms; the staging digests %.0f ms (%.0f-%.0f)\n",
		  median(@gap), median(@dg), $sorted[0], $sorted[-1];
	}
}
