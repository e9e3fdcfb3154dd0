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
use File::Temp qw(tempfile);
use IPC::Run qw(run timeout);
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
	my ($out, $err) = ('', '');
	# psql exits unread when it cannot connect (a server in crash recovery):
	# writing its input must not kill the test with SIGPIPE
	my $ok = eval {
		local $SIG{PIPE} = 'IGNORE';
		run \@cmd, '<', \$sql, '>', \$out, '2>', \$err, timeout($opt{timeout} // 300);
	};
	die $@ if $@ && $@ !~ /Broken pipe/;
	chomp $out;
	return ($ok ? 0 : ($? >> 8 || 1), $out, $err);
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

# ch($sql, %opt) -> ($http_status, $body, $headers).  Options: data (body to
# post after the query, which then goes in the `query` URL parameter),
# params (hashref of URL settings), timeout.
sub ch
{
	my ($sql, %opt) = @_;
	my %p = %{ $opt{params} // {} };
	my $in;
	if (defined $opt{data})
	{
		$p{query} = $sql;
		$in = $opt{data};
	}
	else
	{
		$in = $sql;
	}
	my $url = "$ENV{DPWIN_CH_URL}/";
	$url .= '?' . join('&', map { uri_escape($_) . '=' . uri_escape($p{$_}) } sort keys %p)
	  if %p;
	# The process id in the name: forked processes that share a seeded
	# rand() (test/chaos.sh) would otherwise draw the same names.
	my ($hfh, $hfile) = tempfile("dpwin_ch_$$\_XXXXXXXX", TMPDIR => 1, UNLINK => 1);
	close $hfh;
	my @cmd = ('curl', '-sS', '-o', '-', '-D', $hfile, '-w', '\n%{http_code}',
		'-u', "$ENV{DPWIN_CH_USER}:$ENV{DPWIN_CH_PASSWORD}",
		'--max-time', $opt{timeout} // 120, '-X', 'POST',
		'--data-binary', '@-');
	push @cmd, '-H', 'Transfer-Encoding: chunked' if defined $opt{data};
	push @cmd, $url;
	my ($out, $err) = ('', '');
	run \@cmd, '<', \$in, '>', \$out, '2>', \$err, timeout(($opt{timeout} // 120) + 10);
	my ($body, $code) = $out =~ /\A(.*)\n(\d{3})\z/s;
	local $/;
	open my $h, '<', $hfile or die;
	my $headers = <$h>;
	close $h;
	# removed now: a process that polls (the chaos reader) would fill /tmp
	unlink $hfile;
	return ($code // 0, $body // $out, $headers // '');
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
	my ($out, $err) = ('', '');
	run [ 'curl', '-sS', '-X', $method, "$ENV{DPWIN_CH_CONTROL_URL}$path" ],
	  '>', \$out, '2>', \$err, timeout(30)
	  or die "control request $method $path failed: $err";
	return $out;
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

sub ch_log_since
{
	my ($since) = @_;
	my @rows;
	for my $l (split /\n/, ch_control('GET', "/log?since=$since"))
	{
		my ($seq, $ms, $qid, $user, $status, $query) = split /\t/, $l, 6;
		next unless defined $query;
		$query =~ s/\\n/\n/g;
		$query =~ s/\\t/\t/g;
		$query =~ s/\\\\/\\/g;
		push @rows,
		  {
			seq => $seq,
			ms => $ms,
			query_id => $qid,
			user => $user,
			status => $status,
			query => $query
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
