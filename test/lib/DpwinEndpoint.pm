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

sub unescape
{
	my ($s) = @_;
	$s =~ s/\\(\\|t|n)/$1 eq 't' ? "\t" : $1 eq 'n' ? "\n" : "\\"/ge;
	return $s;
}

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
