#!/usr/bin/perl
#
# test/bench/server_time.pl — where the server's time goes in a refresh
# (docs/benchmark.md, "Small windows and large targets").
#
#   perl test/bench/server_time.pl test/bench/out/statements/shared_direct_00_00_day_30_dpwin_r*.tsv
#
# Reads the statement files the benchmark writes (see sequence.pl) and
# prints, per kind of statement, the time its statements spent on the
# server (answer minus arrival, so a statement's wait for a core is
# counted), summed over one refresh, as the median over the files; a kind
# a file does not have counts 0 there.  Statements that overlap are each
# counted whole: the sum is the server's work, not the wall time.
use strict;
use warnings;

my @kinds = (
	[ 'admission', qr/^SELECT version\(\)|system\.databases/ ],
	[ 'EXCHANGE probe', qr/_probe_/ ],
	[ 'staging CREATE', qr/^CREATE TABLE \S+_stg_/ ],
	[ 'staging INSERT', qr/^INSERT INTO \S+_stg_/ ],
	[ 'staging digest', qr/^SELECT count\(\), sum\(reinterpretAsUInt64\(sipHash/ ],
	[ 'generation CREATE', qr/^CREATE TABLE \S+_gen` AS/ ],
	[ 'clone ALTER', qr/^ALTER TABLE .* ATTACH PARTITION .* FROM (?!\S+_stg_)/ ],
	[ 'attach of staged parts', qr/^ALTER TABLE .* ATTACH PARTITION .* FROM \S+_stg_/ ],
	[ 'the expert\'s pull', qr/^INSERT INTO .* SELECT/ ],
	[ 'EXCHANGE, RENAME', qr/^(EXCHANGE|RENAME)/ ],
	[ 'DROP', qr/^DROP/ ],
	[ 'checks: parts, counts, copies, UUIDs', qr/./ ],
);

my (%sum, $files);
for my $f (@ARGV)
{
	open my $h, '<', $f or die "$f: $!\n";
	my %s;
	while (my $line = <$h>)
	{
		next if $line =~ /^#/;
		chomp $line;
		my ($arrival, $answer, undef, undef, $query) = split /\t/, $line, 5;
		next unless defined $query && $answer =~ /^[\d.]+$/;
		my ($kind) = map { $_->[0] } grep { $query =~ $_->[1] } @kinds;
		$s{$kind} += $answer - $arrival;
		$s{total} += $answer - $arrival;
	}
	close $h;
	push @{ $sum{$_} }, $s{$_} // 0 for (map({ $_->[0] } @kinds), 'total');
	$files++;
}
die "no statement files\n" unless $files;

sub median
{
	my @v = sort { $a <=> $b } @_;
	return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2;
}

printf "%d files; ms on the server per refresh, by kind (medians)\n", $files;
for my $k (map({ $_->[0] } @kinds), 'total')
{
	my $m = median(@{ $sum{$k} });
	printf "  %-40s %8.1f\n", $k, $m if $m > 0 || $k eq 'total';
}
