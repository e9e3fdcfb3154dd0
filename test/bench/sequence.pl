#!/usr/bin/perl
#
# test/bench/sequence.pl — which of a refresh's statements run one after
# another (docs/benchmark.md, "Where the time goes").
#
#   perl test/bench/sequence.pl test/bench/out/statements/split_20_*_dpwin_r*.tsv
#
# Reads the statement files the benchmark writes for every variant
# (test/bench/out/statements/<mode>_<end>_<target>_<variant>_r<round>.tsv:
# arrival and answer in ms from the variant's start, the statement's rank
# in the longest sequence of statements that do not overlap in time, its
# status and text; the sequence is computed again here) and prints, per phase of a dpwin refresh and per kind of
# statement, the statements in that sequence and all of them, as the
# median over the files, then the mean gap between two statements of the
# sequence (one round trip plus the client's work between them), and where
# the wall time goes: before the first statement of the rows (a chunk
# worker's first CREATE of a staging table, the expert's INSERT ... SELECT
# FROM postgresql()), from it to the end of the rows' statements (the last
# staging digest's answer, the pull's answer), and after them, to the last
# answer.  For a dpwin refresh it then splits the time after the rows:
# the last staging digest, from its answer to the ATTACH of the staged
# parts (the re-admission among it), from that ATTACH to the answer of
# the window's facts (the facts statement itself among it; without one,
# to the checks' last answer), to the EXCHANGE that publishes, and from
# it to the last answer.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use BenchStats qw(median);
use List::Util qw(sum);
use POSIX qw(floor);

# The first kind that matches is the statement's.  The files may hold a
# statement's text cut short, so the staged parts' ATTACH (it names a
# staging table early) is recognised before the generation's clone.
my @kinds = (
	[ 'admission: server, target, policies, plan' => qr/^(SELECT version\(\)|SELECT 'D', engine|SELECT name FROM system\.row_policies|EXPLAIN )/ ],
	[ 'admission: EXCHANGE probe' => qr/_dpwin_(?:[0-9]+_[0-9a-f]{12}_)?probe_|^SELECT engine FROM system\.databases/ ],
	[ 'staging table DROP, CREATE' => qr/^(DROP|CREATE) TABLE .*_stg_/ ],
	[ 'staging table description' => qr/^SELECT \* FROM \(SELECT 'T', engine_full.*_stg_/ ],
	[ 'staging INSERT' => qr/^INSERT INTO .*_stg_/ ],
	[ 'staging digest' => qr/sipHash64Keyed|sipHash128ReferenceKeyed/ ],
	[ 'build: attach staged parts' => qr/ATTACH PARTITION .*_stg_/ ],
	[ 'generation: create, describe, clone' => qr/_gen`? AS |^SELECT \* FROM \(SELECT 'T', engine_full|ATTACH PARTITION .* FROM `[^`]+`\.`(?!_dpwin_)|__dpwin_p/ ],
	[ 'DELETE of the window in the generation' => qr/^DELETE FROM|^ALTER TABLE \S+ DELETE WHERE|APPLY DELETED MASK/ ],
	[ 'checks: parts, counts' => qr/hash_of_all_files|partition_id, count\(\), sum\(rows\)|_partition_id, count\(\)|^SELECT countIf|^SELECT DISTINCT `table`, partition_id/ ],
	[ 'EXCHANGE and its UUID checks' => qr/^EXCHANGE TABLES|^SELECT (?:name, )?toString\(uuid\)/ ],
	[ 'backup RENAME' => qr/^RENAME TABLE/ ],
	[ 'evidence' => qr/toJSONString/ ],
	[ 'clean-up' => qr/^SELECT name FROM system\.tables .*startsWith|^DROP TABLE IF EXISTS/ ],
);

sub kind_of
{
	my ($text, $after) = @_;
	return 'clean-up' if $after && $text =~ /^DROP TABLE/;
	for my $k (@kinds) { return $k->[0] if $text =~ $k->[1]; }
	return 'other';
}

# The steps after a dpwin refresh's rows, in the order after_rows() gives
# their times.
# Without a facts statement (the facts came with the chunks' digests),
# the checks' last answer before the EXCHANGE stands for its answer.
my @after_steps = ('the last staging digest', 'its answer to the staged parts\' ATTACH',
	'  the re-admission among it', 'the ATTACH to the facts\' (checks\') answer',
	'  the facts statement among it', 'that answer to the EXCHANGE',
	'the EXCHANGE to the last answer');

# Their times in ms, pushed onto @$into (one list per step); nothing for a
# file without them (a peer's, or a refresh that failed).
sub after_rows
{
	my ($st, $into) = @_;
	my ($attach) = grep { $_->[2] eq 'build: attach staged parts' } @$st;
	my ($facts) = grep { $_->[2] eq 'evidence' } @$st;
	my ($exchange) = reverse grep { $_->[3] =~ /^EXCHANGE TABLES/ } @$st;
	return unless $attach && $exchange;
	unless ($facts)
	{
		my ($last) = sort { $b->[1] <=> $a->[1] }
		  grep { $_->[0] >= $attach->[0] && $_->[1] <= $exchange->[0] } @$st;
		return unless $last;
		$facts = [ $last->[1], $last->[1] ];
	}
	# the last digest answered before the ATTACH (a cut partition's digest
	# in the generation may come later)
	my ($digest) = sort { $b->[1] <=> $a->[1] }
	  grep { $_->[2] eq 'staging digest' && $_->[1] <= $attach->[0] } @$st;
	return unless $digest;
	my ($readmit) = grep { $_->[3] =~ /^SELECT 'D', engine/ && $_->[0] >= $digest->[0] } @$st;
	my $end = (sort { $b <=> $a } map { $_->[1] } @$st)[0];
	my @v = ($digest->[1] - $digest->[0], $attach->[0] - $digest->[1],
		$readmit ? $readmit->[1] - $readmit->[0] : 0, $facts->[1] - $attach->[0],
		$facts->[1] - $facts->[0], $exchange->[0] - $facts->[1], $end - $exchange->[0]);
	push @{ $into->[$_] }, $v[$_] for 0 .. $#v;
}

die "usage: perl test/bench/sequence.pl STATEMENTS.tsv ...\n" unless @ARGV;
my (%seq, %all, @gaps, @nseq, @nall, @walls, @head, @rows, @tail, @after);
for my $file (@ARGV)
{
	open my $f, '<', $file or die "$file: $!\n";
	my (%a, @st);
	my $after = 0;    # past the EXCHANGE that publishes
	while (my $l = <$f>)
	{
		next if $l =~ /^#/;
		chomp $l;
		my ($arr, $ans, $rank, $status, $text) = split /\t/, $l, 5;
		$text //= '';
		# not the variant's: the benchmark's own DROP ... SYNC, and
		# netcheck.sh's SELECT 1 when it ran alongside
		next if $text =~ / SYNC$/ || $text eq 'SELECT 1';
		my $k = kind_of($text, $after);
		$after = 1 if $text =~ /^EXCHANGE TABLES/ && $text !~ /_probe_[0-9a-f]{16}_a`/;
		$a{$k}++;
		push @st, [ $arr, $ans, $k, $text ];
	}
	close $f;
	# the rows' statements and their span
	my @r = grep { $_->[2] eq 'staging INSERT' || $_->[2] eq 'staging table DROP, CREATE'
		  || $_->[3] =~ /^INSERT INTO .* FROM postgresql\(/ } @st;
	my @d = grep { $_->[2] eq 'staging digest' && $_->[3] =~ /_stg_/ } @st;
	if (@r && @st)
	{
		my $first = (sort { $a <=> $b } map { $_->[0] } @r)[0];
		my $rows_end = (sort { $b <=> $a } map { $_->[1] } (@r, @d))[0];
		my $end = (sort { $b <=> $a } map { $_->[1] } @st)[0];
		push @head, $first;
		push @rows, $rows_end - $first;
		push @tail, $end - $rows_end;
	}
	after_rows(\@st, \@after);
	# the sequence again (the file's ranks may count statements left out
	# above): greedy by answer time, as the benchmark does
	my (%s, @in);
	my $last = -1e9;
	for my $x (sort { $a->[1] <=> $b->[1] } @st)
	{
		next unless $x->[0] >= floor($last);
		push @in, [ scalar(@in) + 1, $x->[0], $x->[1] ];
		$s{ $x->[2] }++;
		$last = $x->[1];
	}
	push @gaps, map { $in[$_][1] - $in[ $_ - 1 ][2] } 1 .. $#in;
	push @nseq, scalar @in;
	push @nall, sum(values %a) // 0;
	push @walls, @in ? $in[-1][2] : 0;
	for my $k ((map { $_->[0] } @kinds), 'other')
	{
		push @{ $seq{$k} }, $s{$k} // 0;
		push @{ $all{$k} }, $a{$k} // 0;
	}
}
printf "%d files; statements in sequence / all, medians\n", scalar @ARGV;
for my $k ((map { $_->[0] } @kinds), 'other')
{
	next unless grep { $_ } @{ $all{$k} };
	printf "  %-42s %5g / %g\n", $k, median(@{ $seq{$k} }), median(@{ $all{$k} });
}
printf "  %-42s %5g / %g\n", 'total', median(@nseq), median(@nall);
printf "gap between two statements of the sequence: median %.1f ms, mean %.1f ms (%d gaps)\n", median(@gaps),
  @gaps ? sum(@gaps) / @gaps : 0, scalar @gaps;
printf "wall time, medians: before the rows %.0f ms, the rows %.0f ms, after them %.0f ms (%d files)\n",
  median(@head), median(@rows), median(@tail), scalar @head
  if @head;
if (@after)
{
	printf "after the rows, medians over %d files, ms:\n", scalar @{ $after[0] };
	printf "  %-42s %5.0f\n", $after_steps[$_], median(@{ $after[$_] }) for 0 .. $#after_steps;
}
