# test/bench/BenchStats.pm — the statistics the benchmark's readers of
# results and statement files share (floors.pl, sequence.pl,
# insert_gaps.pl).
package BenchStats;

use strict;
use warnings;
use Exporter 'import';

our @EXPORT_OK = qw(median);

# The median of a list of numbers (the mean of the middle two of an even
# count); 0 for an empty list.
sub median
{
	my @v = sort { $a <=> $b } @_;
	return 0 unless @v;
	return @v % 2 ? $v[ $#v / 2 ] : ($v[ @v / 2 - 1 ] + $v[ @v / 2 ]) / 2;
}

1;
