package DpwinEndpoint;

# The endpoint's control port beyond DpwinTest's ch_control/ch_log_since
# (docs/endpoint.md, "The control port"): the query_id mode, holds and
# their release, the statements running now, the connections, the query
# log with every field, and waits on them instead of sleeps.

use strict;
use warnings;
use Exporter 'import';
use Test::More;
use DpwinTest;

our @EXPORT_OK = qw(
  query_ids_mode set_query_ids both_modes
  release running wait_running connections faults_pending
  log_entries wait_logged sockets_accepted holds
  only_held_timed_out hedge
);

# The endpoint's query_id mode: 'visible' (statements run under the
# client's query_id, as on a server) or 'hidden' (under the engine's own
# ids, as behind a proxy that drops them).
sub query_ids_mode
{
	my $m = ch_control('GET', '/query_ids');
	chomp $m;
	return $m;
}

my $mode_changed = 0;

sub set_query_ids
{
	my ($mode) = @_;
	my $m = ch_control('POST', "/query_ids?mode=$mode");
	chomp $m;
	die "could not set the query_id mode to $mode: $m" unless $m eq $mode;
	$mode_changed = $mode ne 'visible';
}

# The mode outlives the endpoint's restarts (it is kept in its data
# directory): a test file that dies half-way must not leave the next one in
# the hidden mode.
END
{
	local $?;	# the test's exit status
	eval { set_query_ids('visible') } if $mode_changed;
}

# Run $code once per mode, visible first, with the mode set; the endpoint
# is left in the visible mode (its default).
sub both_modes
{
	my ($code) = @_;
	for my $mode ('visible', 'hidden')
	{
		set_query_ids($mode);
		note("--- query_ids $mode ---");
		$code->($mode);
	}
	set_query_ids('visible');
}

# Release the holds (mode=hold) whose text contains $pattern; returns how
# many were released.
sub release
{
	my ($pattern) = @_;
	my $n = ch_control('POST', '/release?pattern=' . DpwinTest::uri_escape($pattern // ''));
	chomp $n;
	return $n;
}

# The endpoint's escaping of a logged field undone (DpwinTest::log_field).
sub unescape { return DpwinTest::log_field(@_); }

# The statements the endpoint is running: hashes of query_id, user, phase
# (delaying, holding, running, answering), ms and query.
sub running
{
	my @rows;
	for my $l (split /\n/, ch_control('GET', '/running'))
	{
		my ($qid, $user, $phase, $ms, $query) = split /\t/, $l, 5;
		next unless defined $query;
		push @rows, { query_id => unescape($qid), user => unescape($user), phase => $phase, ms => $ms,
			query => unescape($query) };
	}
	return @rows;
}

# Wait until at least $n running statements match $re (and $phase, if
# given); returns whether they did within $timeout seconds.
sub wait_running
{
	my ($re, $n, %opt) = @_;
	return wait_until(
		sub {
			my @m = grep { $_->{query} =~ $re && (!$opt{phase} || $_->{phase} eq $opt{phase}) } running();
			return @m >= ($n // 1);
		},
		$opt{timeout} // 30);
}

# The main port's connections: hashes of id, state (new, busy, idle),
# idle_ms and requests.
sub connections
{
	my @rows;
	for my $l (split /\n/, ch_control('GET', '/connections'))
	{
		my ($id, $state, $idle, $requests) = split /\t/, $l, -1;
		push @rows, { id => $id, state => $state, idle_ms => $idle, requests => $requests };
	}
	return @rows;
}

# How many TCP connections the main port has accepted since the endpoint
# started (refused ones included): a client that did no I/O opened none.
sub sockets_accepted
{
	my %n = map { split /\t/ } grep { length } split /\n/, ch_control('GET', '/sockets');
	die "GET /sockets answered no count" unless defined $n{accepted};
	return $n{accepted};
}

# The holds in progress: hashes of token, kills (the KILL QUERYs a
# stubborn hold outlived), released and query.
sub holds
{
	my @rows;
	for my $l (split /\n/, ch_control('GET', '/holds'))
	{
		my ($token, $kills, $released, $query) = split /\t/, $l, 4;
		next unless defined $query;
		push @rows, { token => $token, kills => $kills, released => $released, query => unescape($query) };
	}
	return @rows;
}

# The pending faults, as lines "mode\tcount\tpattern".
sub faults_pending
{
	return grep { length } split /\n/, ch_control('GET', '/faults');
}

# The query log after $since with every field: seq, ms, query_id, user,
# status, query.
sub log_entries
{
	my ($since) = @_;
	my @rows;
	for my $l (split /\n/, ch_control('GET', "/log?since=$since"))
	{
		my ($seq, $ms, $qid, $user, $status, $query) = split /\t/, $l, 6;
		next unless defined $query;
		push @rows, { seq => $seq, ms => $ms, query_id => unescape($qid), user => unescape($user),
			status => $status, query => unescape($query) };
	}
	return @rows;
}

# Since $seq, every statement of the scenario $s's invocation that the
# test did not hold ($held matches the held ones) was answered (with an
# HTTP status: an error of dpwin's own probing is an answer too), and
# every statement dpwin settled (a system.processes lookup or a KILL
# QUERY naming its query_id) was a held one: on a slow machine a
# request_timeout meant for a held statement only could meet another, and
# change the outcome a test asserts.
sub only_held_timed_out
{
	my ($s, $seq, $held) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @mine = grep { index($_->{query_id}, "dpwin-$s->{inv}-") == 0 } log_entries($seq);
	# the held statements, answered since or still running
	my %held_ids = map { $_->{query_id} => 1 } grep { $_->{query} =~ $held } @mine, running();
	my @other = grep { $_->{query} !~ $held } @mine;
	my @bad = grep { $_->{status} !~ /^\d+$/ } @other;
	is(scalar(@bad), 0, "$s->{tag}: every statement not held was answered (" . scalar(@other) . ')')
	  or diag(join("\n", map { "$_->{status} $_->{query}" } @bad));
	# (a lookup of its own query_id is dpwin's probe of the query-id mode)
	my @settled = grep { $_ ne '' } map {
		$_->{query} =~ /^(?:KILL QUERY|SELECT count\(\) FROM system\.processes) WHERE query_id = '([^']+)'/
		  && $1 ne $_->{query_id} ? $1 : ''
	} @other;
	is(scalar(grep { !$held_ids{$_} } @settled), 0, "$s->{tag}: dpwin settled held statements only")
	  or diag(join("\n", grep { !$held_ids{$_} } @settled));
}

# A test whose outcome may take one of two branches with timing records
# the branch taken: one line "case branch" appended to the file
# DPWIN_HEDGE_LOG (default: hedges.log in the sandbox folder), which
# test/check.sh counts in its summary, so that a branch that must
# sometimes run can be told from one that never does.
sub hedge
{
	my ($case, $branch) = @_;
	my $file = $ENV{DPWIN_HEDGE_LOG} // "$ENV{DPWIN_SANDBOX}/hedges.log";
	open(my $fh, '>>', $file) or die "$file: $!";
	print $fh "$case $branch\n";
	close($fh);
	note("hedge: $case took the branch $branch");
}

# Wait until the query log shows at least $o{n} (default 1) statements
# matching $re received after $since.  A statement is logged when it ends;
# with answered => 1 only those that ended with an HTTP answer count (a
# status such as 200, 500 or 200+exception), not those whose connection
# closed without one (lost, idle-closed, shutdown, aborted).  Returns
# whether they came within $o{timeout} seconds (default 60).
sub wait_logged
{
	my ($since, $re, %o) = @_;
	return wait_until(sub {
			($o{n} // 1) <= grep { $_->{query} =~ $re && (!$o{answered} || $_->{status} =~ /^\d{3}/) }
			  log_entries($since)
		}, $o{timeout} // 60);
}

1;
