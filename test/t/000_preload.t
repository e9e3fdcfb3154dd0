# dpwin refuses to load without shared_preload_libraries, with a hint.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use File::Temp qw(tempdir);
use IPC::Run qw(run timeout);

my $pgbin = $ENV{DPWIN_PGBIN} // '/usr/lib/postgresql/15/bin';
my $dir = tempdir(CLEANUP => 1);
chmod 0777, $dir;
# as postgres, where the sandbox's server runs (in a chroot for 17 and later)
my $as = [ repo_root() . '/test/sandbox.sh', 'pg-exec' ];
my $port = 54400 + ($$ % 500);

ok(run([ @$as, "$pgbin/initdb -D $dir/data -U postgres -A trust >/dev/null" ]), 'initdb');
ok(run([ @$as, "$pgbin/pg_ctl -D $dir/data -o '-p $port -k $dir -c listen_addresses=' -l $dir/log -w start >/dev/null" ]), 'start a cluster without dpwin preloaded');

my ($out, $err) = ('', '');
run [ 'psql', '-X', '-h', $dir, '-p', $port, '-U', 'postgres', '-d', 'postgres',
	'-v', 'VERBOSITY=verbose', '-c', 'CREATE EXTENSION dpwin' ],
  '>', \$out, '2>', \$err, timeout(60);
like($err, qr/55000: dpwin must be loaded via shared_preload_libraries/,
	'CREATE EXTENSION without preload fails with SQLSTATE 55000');
like($err, qr/HINT:\s+Add dpwin to shared_preload_libraries/, 'with a hint');

($out, $err) = ('', '');
run [ 'psql', '-X', '-h', $dir, '-p', $port, '-U', 'postgres', '-d', 'postgres',
	'-c', "LOAD 'dpwin'" ], '>', \$out, '2>', \$err, timeout(60);
like($err, qr/must be loaded via shared_preload_libraries/, 'LOAD fails the same way');

run([ @$as, "$pgbin/pg_ctl -D $dir/data -m immediate -w stop >/dev/null" ]);

# and the sandbox, which preloads it, has the extension, at the version of
# the control file, which is the library's own
my ($control_version) = do { local (@ARGV, $/) = ('dpwin.control'); <> } =~ /^default_version = '([^']+)'/m;
is(psql_ok("SELECT dpwin.version()"), $control_version, "sandbox: dpwin.version() is the control file's $control_version");
is(psql_ok("SELECT extversion FROM pg_extension WHERE extname = 'dpwin'"), $control_version,
	'sandbox: the installed extension is at that version');

done_testing();
