#!/usr/bin/perl
#
# test/bench/profile-classify.pl PIDS < perf script -F pid,ip,sym,dso
#
# Sorts the samples of the given processes (comma list) into kinds of
# work by the function they were taken in; a sample in the kernel goes by
# its call chain (page fault on shared or private memory, sending, waiting
# and reading, other), so call graphs must have been recorded for that
# split.  Prints the share of each kind.  Used by profile.sh.
use strict;
use warnings;

my %want = map { $_ => 1 } split /,/, (shift // '');
my (%count, $samples, $pid, @chain);

sub kind
{
	my ($sym, $dso) = @{ $chain[0] };
	if ($dso =~ /kernel/)
	{
		my $all = join ' ', map { $_->[0] } @chain;
		return $all =~ /filemap_map_pages|shmem_fault/ ? 'kernel: page faults on shared memory (shared buffers first touched)'
		  : $all =~ /handle_mm_fault/ ? 'kernel: page faults on private memory'
		  : $all =~ /sendto|sendmsg/ ? 'kernel: sending to ClickHouse (TCP)'
		  : $all =~ /poll|recv|sys_read/ ? 'kernel: waiting for and reading replies'
		  : 'kernel: other (scheduling, process start and exit, mmap)';
	}
	if ($dso =~ /dpwin/)
	{
		return $sym =~ /siphash|digest_add/ ? 'dpwin: digest (SipHash-2-4)' : 'dpwin: RowBinary encoding and the worker loop';
	}
	if ($dso =~ m{/postgres$})
	{
		return 'dpwin: RowBinary encoding and the worker loop' if $sym =~ /^(enlargeStringInfo|appendBinaryStringInfo)$/;
		return 'PostgreSQL: heap_deform_tuple' if $sym eq 'heap_deform_tuple';
		return 'PostgreSQL: SPI tuple copies' if $sym =~ /printtup|^SPI_|heap_copytuple|ExecCopySlot/;
		return 'PostgreSQL: parsing and planning the chunk query' if $sym =~ /yy|^parse|plan|Plan|cost_|path|Path/;
		return 'PostgreSQL: index scan, heap fetch, visibility, buffers, the rest';
	}
	return 'libc: memcpy, malloc' if $dso =~ /libc/;
	return 'libcurl' if $dso =~ /curl|ssl|crypto/;
	return 'other';
}

sub flush
{
	return unless defined $pid && $want{$pid} && @chain;
	$samples++;
	$count{ kind() }++;
}

while (<STDIN>)
{
	if (/^\s*(\d+)\s*$/)
	{
		flush();
		($pid, @chain) = ($1);
	}
	elsif (/^\s*(\d+)\s+([0-9a-f]+)\s+(\S+)\s+\((.*)\)\s*$/)
	{
		# without call graphs: one line per sample
		flush();
		($pid, @chain) = ($1, [ $3, $4 ]);
	}
	elsif (/^\s+[0-9a-f]+\s+(\S+).*\((.*)\)\s*$/)
	{
		push @chain, [ $1, $2 ];
	}
}
flush();
exit 0 unless $samples;
printf "%6.1f%%  %s\n", 100 * $count{$_} / $samples, $_ for sort { $count{$b} <=> $count{$a} } keys %count;
printf "(%d samples)\n", $samples;
