package DpwinTest;

# Helpers shared by the TAP suite (test/t/*.t).
#
# The suite runs against the sandbox started by test/sandbox.sh: this module
# loads the sandbox's environment file, so a test works the same whether
# prove is run by test/check.sh, by `make tapcheck` or by hand.

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use File::Spec;
use HTTP::Tiny;
use MIME::Base64 qw(encode_base64);
use POSIX ();
use Time::HiRes qw(usleep time);

our @EXPORT = qw(psql psql_ok psql_err ch ch_ok ch_control ch_log_since
  ch_log_seq sandbox_root unique_name wait_until repo_root);

my $repo_root = File::Spec->rel2abs(dirname(__FILE__) . '/../..');

sub repo_root { return $repo_root }

sub sandbox_root { return $ENV{DPWIN_SANDBOX} }

# Load the sandbox's env file (export lines), overriding what the caller has:
# PGXS sets PGPORT for its own temporary installations.
BEGIN
{
	my $envfile =
	  $ENV{DPWIN_SANDBOX_DIR}
	  ? "$ENV{DPWIN_SANDBOX_DIR}/env"
	  : File::Spec->rel2abs(dirname(__FILE__) . '/../.sandbox/env');
	if (-r $envfile)
	{
		open my $fh, '<', $envfile or die "cannot read $envfile: $!";
		while (my $line = <$fh>)
		{
			next unless $line =~ /^export (\w+)='(.*)'$/;
			$ENV{$1} = $2;
		}
		close $fh;
	}
	die "the sandbox is not running: start it with test/sandbox.sh start\n"
	  unless $ENV{DPWIN_CH_URL} && $ENV{PGHOST};

	# The client programs themselves first in PATH, of the newest version
	# installed (the one Debian's pg_wrapper would choose), rather than the
	# wrapper: it is a Perl script that costs about 70 ms of CPU a call,
	# more than psql itself, and the suite's polls call psql many times a
	# second.
	my ($bin) = map { $_->[1] } sort { $b->[0] <=> $a->[0] }
	  map { m{/(\d+)/bin$} ? [ $1, $_ ] : () } grep { -x "$_/psql" } glob('/usr/lib/postgresql/*/bin');
	$ENV{PATH} = "$bin:$ENV{PATH}" if $bin && ($ENV{PATH} // '') !~ m{^\Q$bin\E:};
}

# run_captured(\@cmd, $stdin, $timeout_s) -> ($rc, $stdout, $stderr): run a
# command with $stdin as its input and its output captured, killed after
# $timeout_s (then this dies).  A plain fork and exec with anonymous
# temporary files: IPC::Run's run() costs about 35 ms of CPU a call, which
# the polls of a side-by-side suite on two cores cannot afford.
sub run_captured
{
	my ($cmd, $in, $timeout) = @_;
	open(my $out_fh, '+>', undef) or die "cannot make a temporary file: $!";
	open(my $err_fh, '+>', undef) or die "cannot make a temporary file: $!";
	pipe(my $rd, my $wr) or die "pipe: $!";
	STDOUT->flush;
	STDERR->flush;
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		close $wr;
		open(STDIN, '<&', $rd) && open(STDOUT, '>&', $out_fh) && open(STDERR, '>&', $err_fh)
		  or POSIX::_exit(126);
		no warnings 'exec';
		exec { $cmd->[0] } @$cmd;
		POSIX::_exit(127);
	}
	close $rd;
	my $timed_out = 0;
	{
		local $SIG{ALRM} = sub { $timed_out = 1; kill 'KILL', $pid };
		# a command that exits unread (psql that cannot connect to a server
		# in crash recovery) must not kill the test with SIGPIPE
		local $SIG{PIPE} = 'IGNORE';
		alarm($timeout);
		print $wr $in if defined $in && length $in;
		close $wr;
		while (waitpid($pid, 0) == -1 && $!{EINTR}) { }
		alarm(0);
	}
	my $rc = $? >> 8 || ($? & 127 ? 1 : 0);
	die "timeout: @$cmd ran for more than ${timeout}s\n" if $timed_out;
	my ($out, $err) = ('', '');
	seek($out_fh, 0, 0);
	seek($err_fh, 0, 0);
	{
		local $/;
		$out = <$out_fh> // '';
		$err = <$err_fh> // '';
	}
	return ($rc, $out, $err);
}

# psql($sql, %opt) -> ($rc, $stdout, $stderr).  Unaligned, tuples only, stops
# at the first error.  Options: timeout (s), user (role), db.
sub psql
{
	my ($sql, %opt) = @_;
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-v', 'VERBOSITY=default');
	push @cmd, '-U', $opt{user} if $opt{user};
	push @cmd, '-d', $opt{db} if $opt{db};
	push @cmd, '-F', $opt{sep} // '|';
	my ($rc, $out, $err) = run_captured(\@cmd, $sql, $opt{timeout} // 300);
	chomp $out;
	return ($rc, $out, $err);
}

# psql_ok($sql): the output; dies with psql's error on failure.
sub psql_ok
{
	my ($sql, %opt) = @_;
	my ($rc, $out, $err) = psql($sql, %opt);
	die "psql failed ($rc): $err\nSQL: $sql\n" if $rc;
	return $out;
}

# psql_err($sql): runs $sql expecting failure; returns "SQLSTATE: message".
sub psql_err
{
	my ($sql, %opt) = @_;
	my ($rc, $out, $err) =
	  psql("\\set VERBOSITY verbose\n" . $sql, %opt);
	return undef unless $rc;
	my ($state, $msg) = $err =~ /ERROR:\s+([0-9A-Z]{5}):\s+(.*)/;
	return defined $state ? "$state: $msg" : $err;
}

# One HTTP client per process (a forked process makes its own), without
# keep-alive, so that every request is a connection of its own, as curl's
# were.
my ($http, $http_pid) = (undef, 0);

sub http
{
	($http, $http_pid) = (HTTP::Tiny->new(keep_alive => 0, timeout => 130), $$)
	  unless $http && $http_pid == $$;
	return $http;
}

# ch($sql, %opt) -> ($http_status, $body, $headers).  Options: data (body to
# post after the query, which then goes in the `query` URL parameter, sent
# chunked), params (hashref of URL settings), timeout (s, of inactivity).
# A request that reaches no server has status 0 and the error as its body.
sub ch
{
	my ($sql, %opt) = @_;
	my %p = %{ $opt{params} // {} };
	my %req = (headers =>
		  { Authorization => 'Basic ' . encode_base64("$ENV{DPWIN_CH_USER}:$ENV{DPWIN_CH_PASSWORD}", '') });
	if (defined $opt{data})
	{
		$p{query} = $sql;
		my $sent = 0;
		my $data = $opt{data};
		$req{content} = sub { return $sent++ ? undef : $data };
	}
	else
	{
		$req{content} = $sql;
	}
	my $url = "$ENV{DPWIN_CH_URL}/";
	$url .= '?' . join('&', map { uri_escape($_) . '=' . uri_escape($p{$_}) } sort keys %p)
	  if %p;
	my $h = http();
	local $h->{timeout} = $opt{timeout} // 120;
	my $r = $h->request('POST', $url, \%req);
	return (0, $r->{content} // '', '') if $r->{status} == 599;
	my $headers = join('', map {
		my $k = $_;
		map { "$k: $_\r\n" } (ref $r->{headers}{$k} ? @{ $r->{headers}{$k} } : $r->{headers}{$k})
	} sort keys %{ $r->{headers} });
	return ($r->{status}, $r->{content} // '', $headers);
}

# Percent-encode a URL parameter (as UTF-8 bytes).
sub uri_escape
{
	my ($s) = @_;
	utf8::encode($s) if utf8::is_utf8($s);
	$s =~ s/([^A-Za-z0-9\-._~])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

# ch_ok($sql): the body; dies unless status 200.
sub ch_ok
{
	my ($sql, %opt) = @_;
	my ($code, $body) = ch($sql, %opt);
	die "ClickHouse answered $code: $body\nSQL: $sql\n" unless $code == 200;
	return $body;
}

# ch_control($method, $path): talk to the endpoint's test-only control port.
sub ch_control
{
	my ($method, $path) = @_;
	my $h = http();
	local $h->{timeout} = 30;
	my $r = $h->request($method, "$ENV{DPWIN_CH_CONTROL_URL}$path");
	die "control request $method $path failed: $r->{content}" if $r->{status} == 599;
	return $r->{content} // '';
}

# The endpoint's query log: the highest sequence number so far, and the
# queries received after a given one (a list of hashes: seq, ms (arrival,
# Unix milliseconds), query_id, user, status, query).
sub ch_log_seq
{
	my $log = ch_control('GET', '/log');
	my $seq = 0;
	for my $l (split /\n/, $log)
	{
		my ($s) = split /\t/, $l;
		$seq = $s if defined $s && $s =~ /^\d+$/ && $s > $seq;
	}
	return $seq;
}

# A field of the query log as the endpoint escaped it: \\, \t and \n
# stand for a backslash, a tab and a newline.  One pass, so that an
# escaped backslash before an n stays a backslash and an n.
sub log_field
{
	my ($s) = @_;
	$s =~ s/\\([\\tn])/$1 eq 't' ? "\t" : $1 eq 'n' ? "\n" : "\\"/ge;
	return $s;
}

sub ch_log_since
{
	my ($since) = @_;
	my @rows;
	for my $l (split /\n/, ch_control('GET', "/log?since=$since"))
	{
		my ($seq, $ms, $qid, $user, $status, $query) = split /\t/, $l, 6;
		next unless defined $query;
		push @rows,
		  {
			seq => $seq,
			ms => $ms,
			query_id => log_field($qid),
			user => log_field($user),
			status => $status,
			query => log_field($query)
		  };
	}
	return @rows;
}

my $counter = 0;

# A name unique to this test run.
sub unique_name
{
	my ($prefix) = @_;
	$counter++;
	return sprintf('%s_%d_%d', $prefix, $$, $counter);
}

# wait_until($code, $timeout_s): poll until $code returns true.
sub wait_until
{
	my ($code, $timeout) = @_;
	my $deadline = time() + ($timeout // 60);
	while (time() < $deadline)
	{
		return 1 if $code->();
		usleep(100_000);
	}
	return 0;
}

1;
