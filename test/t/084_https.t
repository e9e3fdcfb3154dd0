# HTTPS: a TLS front (socat) before the endpoint, with a throwaway CA made
# by openssl in a temporary folder (a CA, and a server certificate for
# 127.0.0.1 with subjectAltName IP:127.0.0.1).  Peer verification is on
# by default: without the CA the connection is refused (HV00N, with a hint
# about ca_file) before any query reaches ClickHouse; with ca_file a full
# refresh works and publishes the exact window; a host name the
# certificate does not name, another CA, a missing CA file and a plain
# HTTP port are refused; verify_peer 'false' is an explicit opt-out.
use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use IPC::Run qw(run start timeout);
use DpwinTest;
use DpwinFixture qw(pg_literal);

my $tag = "t084_$$";
my $db = $tag;
my $schema = $tag;
my $srv = "${tag}_tls";
my $route = "${tag}_r";

for my $tool (qw(openssl socat))
{
	my $found = grep { -x "$_/$tool" } split /:/, $ENV{PATH};
	BAIL_OUT("$tool is not installed (test/sandbox.sh start installs it)") unless $found;
}

sub sh
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	run(\@cmd, '<', \undef, '>', \$out, '2>', \$err, timeout(60))
	  or die "@cmd failed: $err";
	return $out;
}

# ---- a CA and a server certificate ------------------------------------------------

# The PostgreSQL server reads the CA file, and it may run as another user.
my $dir = tempdir("dpwin_t084_XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0755, $dir;
sub mkca
{
	my ($name) = @_;
	sh('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
		'-keyout', "$dir/$name.key", '-out', "$dir/$name.pem", '-subj', "/CN=dpwin test $name",
		'-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
}
mkca('ca');
mkca('other_ca');
sh('openssl', 'req', '-newkey', 'rsa:2048', '-nodes', '-keyout', "$dir/server.key",
	'-out', "$dir/server.csr", '-subj', '/CN=127.0.0.1');
{
	open my $fh, '>', "$dir/server.ext" or die;
	print $fh "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
	close $fh;
}
sh('openssl', 'x509', '-req', '-in', "$dir/server.csr", '-CA', "$dir/ca.pem", '-CAkey', "$dir/ca.key",
	'-CAcreateserial', '-out', "$dir/server.pem", '-days', '2', '-extfile', "$dir/server.ext");
chmod 0644, "$dir/ca.pem", "$dir/other_ca.pem";
like(sh('openssl', 'x509', '-in', "$dir/server.pem", '-noout', '-ext', 'subjectAltName'),
	qr/IP Address:127\.0\.0\.1/, 'the server certificate names IP 127.0.0.1');

# ---- the TLS front ---------------------------------------------------------------------

my $port = do {
	my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1, ReuseAddr => 1)
	  or die "no free port: $!";
	my $p = $s->sockport;
	close $s;
	$p;
};
my ($ch_host, $ch_port) = $ENV{DPWIN_CH_URL} =~ m{^http://([^/:]+):(\d+)};
# -d -d: socat logs every connection it accepts, whose TLS handshake it
# then begins, so that its log counts handshakes begun (tls_accepted below).
my $socat_out = '';
my $socat_log = "$dir/socat.log";
my $socat = start([ 'socat', '-d', '-d',
		"OPENSSL-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork,cert=$dir/server.pem,key=$dir/server.key,verify=0",
		"TCP:$ch_host:$ch_port" ],
	'<', \undef, '>', \$socat_out, '2>', $socat_log);

# The connections the TLS front has accepted so far: one per TLS handshake
# begun, whether it then succeeds or is refused.
sub tls_accepted
{
	open my $f, '<', $socat_log or return 0;
	return scalar grep { /accepting connection from/ } <$f>;
}
# stopped at the end, or here if the test dies first
END { eval { $socat->kill_kill(grace => 2) } if $socat; }
ok(wait_until(sub {
		my ($out, $err) = ('', '');
		run([ 'curl', '-sS', '--cacert', "$dir/ca.pem", "https://127.0.0.1:$port/ping" ],
			'>', \$out, '2>', \$err, timeout(10));
		return $out =~ /^Ok\./;
	}, 30), "the TLS front answers on https://127.0.0.1:$port");

# ---- fixtures --------------------------------------------------------------------------------

my $https = "https://127.0.0.1:$port";
ch_ok("DROP DATABASE IF EXISTS `$db`");
ch_ok("CREATE DATABASE `$db` ENGINE = Atomic");
ch_ok("CREATE TABLE `$db`.`ev` (id Int64, observed_at Nullable(DateTime64(6, 'UTC')), note Nullable(String)) ENGINE = MergeTree ORDER BY id");
psql_ok("DROP SCHEMA IF EXISTS $schema CASCADE;
	SELECT dpwin.drop_route(route_name) FROM dpwin.routes WHERE route_name = '$route';
	DROP SERVER IF EXISTS $srv CASCADE;
	CREATE SCHEMA $schema;
	CREATE TABLE $schema.ev (id bigint NOT NULL, observed_at timestamptz, note text);
	INSERT INTO $schema.ev SELECT g, timestamptz '2026-09-01 00:00:00+00' + g * interval '37 minutes', 'über TLS ' || g
	  FROM generate_series(1, 600) g;
	INSERT INTO $schema.ev SELECT * FROM $schema.ev WHERE id % 10 = 0;
	CREATE SERVER $srv FOREIGN DATA WRAPPER dpwin_clickhouse OPTIONS (url '$https', connect_timeout '5s');");
psql_ok("CREATE USER MAPPING FOR CURRENT_USER SERVER $srv OPTIONS (user " . pg_literal($ENV{DPWIN_CH_REFRESH_USER})
	  . ", password " . pg_literal($ENV{DPWIN_CH_PASSWORD}) . ")");
psql_ok("SELECT dpwin.create_route('$route', '$schema.ev', 'observed_at', '$srv', '$db', 'ev', '7 days', '1 day', parallelism => 3)");
is(psql_ok("SELECT verify_peer FROM dpwin_test.server_conf('$srv')"), 't', 'verify_peer is on by default');

# Expect a TLS refusal: HV00N, the message, the ca_file hint; nothing
# reaches ClickHouse.
sub tls_refused
{
	my ($label, $sql, $detail_re, %o) = @_;
	my $seq = ch_log_seq();
	my $accepted = tls_accepted();
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\n$sql");
	like($err, qr/ERROR:\s+HV00N: could not establish a TLS connection to ClickHouse server "$srv"/, "$label: HV00N")
	  or diag($err);
	like($err, qr/HINT:\s+Check the ca_file and verify_peer options of server "$srv"/, "$label: the hint names ca_file");
	like($err, qr/DETAIL:\s+.*$detail_re/i, "$label: the detail says why") if $detail_re;
	is(scalar(ch_log_since($seq)), 0, "$label: no query reached ClickHouse");
	# socat writes its line from its own process: on a busy machine it may
	# come after the client has seen the refusal, so it is awaited
	ok(wait_until(sub { tls_accepted() > $accepted }, 30),
		"$label: the refusal came from a TLS handshake with the front")
	  unless $o{direct};
}

# ---- verification on, no CA ---------------------------------------------------------------------

tls_refused('the system CAs do not know the test CA', "SELECT dpwin_test.ch_query('$srv', 'SELECT 1')",
	qr/certificate/);
tls_refused('a refresh without the CA', "SELECT * FROM dpwin_refresh('$route', '2026-09-09 00:00:00+00')",
	qr/certificate/);
is(psql_ok("SELECT state FROM dpwin.invocations WHERE route_name = '$route'"), 'failed',
	'the refused refresh is journaled as failed');
is(ch_ok("SELECT count() FROM `$db`.`ev`"), "0\n", 'the target was not touched');

# ---- with ca_file ---------------------------------------------------------------------------------

psql_ok("ALTER SERVER $srv OPTIONS (ADD ca_file '$dir/ca.pem')");
is(psql_ok("SELECT rtrim(dpwin_test.ch_query('$srv', 'SELECT 40 + 2'), E'\\n')"), '42', 'with ca_file the server is trusted');
my ($state, $rows) = split /\|/, psql_ok("SELECT state, source_rows FROM dpwin_refresh('$route', '2026-09-09 00:00:00+00')");
is($state, 'completed', 'a full refresh over HTTPS completed');
my $pg_rows = psql_ok("SELECT id || '|' || (extract(epoch FROM observed_at) * 1000000)::bigint || '|' || encode(convert_to(note, 'UTF8'), 'hex')
	FROM $schema.ev WHERE observed_at >= '2026-09-02 00:00:00+00' AND observed_at < '2026-09-09 00:00:00+00' ORDER BY 1");
my $ch_rows = ch_ok("SELECT concat(toString(id), '|', toString(toUnixTimestamp64Micro(assumeNotNull(observed_at))), '|', lower(hex(assumeNotNull(note))))
	FROM `$db`.`ev` ORDER BY 1");
chomp $ch_rows;
is($rows, scalar(split /\n/, $pg_rows), "it read $rows rows");
is_deeply([ sort split /\n/, $ch_rows ], [ sort split /\n/, $pg_rows ], 'the target equals the source window as a multiset');

# ---- what else verification refuses -------------------------------------------------------------------

psql_ok("ALTER SERVER $srv OPTIONS (SET url 'https://localhost:$port')");
tls_refused('a host name the certificate does not name', "SELECT dpwin_test.ch_query('$srv', 'SELECT 1')", undef);
psql_ok("ALTER SERVER $srv OPTIONS (SET url '$https', SET ca_file '$dir/other_ca.pem')");
tls_refused('a certificate from another CA', "SELECT dpwin_test.ch_query('$srv', 'SELECT 1')", qr/certificate/);
psql_ok("ALTER SERVER $srv OPTIONS (SET ca_file '$dir/no_such_ca.pem')");
tls_refused('a CA file that does not exist', "SELECT dpwin_test.ch_query('$srv', 'SELECT 1')", undef);
psql_ok("ALTER SERVER $srv OPTIONS (SET url 'https://127.0.0.1:$ch_port', SET ca_file '$dir/ca.pem')");
tls_refused('https to a plain HTTP port', "SELECT dpwin_test.ch_query('$srv', 'SELECT 1')", undef, direct => 1);

# ---- bad input over HTTPS: refused before any TLS handshake ------------------------------------------

psql_ok("ALTER SERVER $srv OPTIONS (SET url '$https')");
{
	my $accepted = tls_accepted();
	my $seq = ch_log_seq();
	like(psql_err("ALTER SERVER $srv OPTIONS (ADD verify_peer 'no thanks')") // 'ok',
		qr/^HV024: verify_peer "no thanks" is not a boolean/, 'bad input: verify_peer takes only a boolean');
	like(psql_err("SELECT * FROM dpwin_refresh('$route', '2026-09-09 00:00:00+00', 'not-a-uuid')") // 'ok',
		qr/^22P02: /, 'bad input: a malformed invocation id');
	like(psql_err("SELECT * FROM dpwin_refresh('no_such_route_084', '2026-09-09 00:00:00+00')") // 'ok',
		qr/^42704: .*no_such_route_084/, 'bad input: an unknown route, named');
	is(tls_accepted() - $accepted, 0, 'bad input: no TLS handshake was begun with the front');
	is(scalar(ch_log_since($seq)), 0, 'bad input: no query reached ClickHouse');
}

# ---- verify_peer 'false': an explicit opt-out ---------------------------------------------------------

like(psql_err("ALTER SERVER $srv OPTIONS (SET url '$https', DROP ca_file, ADD verify_peer 'no thanks')") // 'ok',
	qr/^HV024: verify_peer "no thanks" is not a boolean/, 'verify_peer takes only a boolean');
psql_ok("ALTER SERVER $srv OPTIONS (SET url '$https', DROP ca_file, ADD verify_peer 'false')");
is(psql_ok("SELECT verify_peer FROM dpwin_test.server_conf('$srv')"), 'f', 'verify_peer false is stored as given');
is(psql_ok("SELECT rtrim(dpwin_test.ch_query('$srv', 'SELECT 7'), E'\\n')"), '7', 'with verify_peer false an unknown CA is accepted');
psql_ok("ALTER SERVER $srv OPTIONS (SET url 'https://localhost:$port')");
is(psql_ok("SELECT rtrim(dpwin_test.ch_query('$srv', 'SELECT 8'), E'\\n')"), '8', '... and so is a host name the certificate does not name');
($state) = split /\|/, psql_ok("SELECT state FROM dpwin_refresh('$route', '2026-09-09 00:00:00+00')");
is($state, 'completed', '... and a refresh works');
psql_ok("ALTER SERVER $srv OPTIONS (SET url '$https', DROP verify_peer)");
tls_refused('dropping verify_peer turns verification back on', "SELECT dpwin_test.ch_query('$srv', 'SELECT 1')", undef);

# ---- clean up -------------------------------------------------------------------------------------------

$socat->signal('TERM');
$socat->finish;
psql_ok("SELECT dpwin.drop_route('$route'); DROP SCHEMA $schema CASCADE; DROP SERVER $srv CASCADE;
	DELETE FROM dpwin.lease WHERE server_name = '$srv'");
ch_ok("DROP DATABASE IF EXISTS `$db`");

done_testing();
