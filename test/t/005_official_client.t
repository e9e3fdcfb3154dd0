# The official ClickHouse JS client (@clickhouse/client, pinned in
# test/client/package-lock.json and installed by test/client/install.sh
# into a git-ignored node_modules) against the endpoint: a client that no
# one here wrote is the check that the endpoint stays a ClickHouse server.
# test/client/client.js does ping, JSONEachRow queries, query parameters,
# per-query settings, inserts, errors and their codes, the query_id echo,
# and finds a running statement by its query_id in system.processes and
# stops it with KILL QUERY; this file checks what it saw.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use IPC::Run qw(run timeout);
use JSON::PP;

my $dir = repo_root() . '/test/client';
my ($out, $err) = ('', '');
run([ "$dir/install.sh" ], '>', \$out, '2>', \$err, timeout(600))
  or BAIL_OUT("test/client/install.sh failed: $err");

local $ENV{T005_DB} = "t005_$$";
($out, $err) = ('', '');
run([ 'node', "$dir/client.js" ], '>', \$out, '2>', \$err, timeout(300))
  or BAIL_OUT("node test/client/client.js failed: $err");
my $o = eval { decode_json($out) } or BAIL_OUT("client.js printed no JSON: $out $err");

is($o->{unexpected}, undef, 'the client met no unexpected error') or diag(explain $o->{unexpected});
is($o->{cleanup}, undef, 'the client dropped its database');

is_deeply($o->{ping}, { success => JSON::PP::true }, 'ping succeeds');
is_deeply($o->{rows}, [ { n => '0', s => '0' }, { n => '1', s => '1' }, { n => '2', s => '2' } ],
	'JSONEachRow rows (64-bit integers quoted, as the server does)');
is_deeply($o->{params}, [ { sum => 42, t => qq{it's "quoted"\ttab} } ], 'query parameters');
is_deeply($o->{settings}, [ { v => '3' } ], 'per-query settings');
is_deeply($o->{inserted}, [ { id => 1, s => 'one' }, { id => 2, s => "two\nlines" } ], 'insert, then read back');

is($o->{errors}{unknown_table}{code}, '60', 'an unknown table is error 60');
is($o->{errors}{unknown_table}{type}, 'UNKNOWN_TABLE', '... of type UNKNOWN_TABLE');
is($o->{errors}{syntax}{code}, '62', 'a syntax error is error 62');
is($o->{errors}{auth}{code}, '516', 'a wrong password is error 516');
is($o->{errors}{auth}{type}, 'AUTHENTICATION_FAILED', '... of type AUTHENTICATION_FAILED');

is($o->{echo}{query_id}, "echo-t005_$$", 'the result carries the query_id the client chose');
is_deeply($o->{echo}{rows}, [ { q => "echo-t005_$$" } ], 'and the statement ran under it: queryID()');

is($o->{processes}, 1, 'a running statement is in system.processes under the client\'s query_id');
is($o->{killed}{error}{code}, '394', 'KILL QUERY WHERE query_id = ... stopped it (error 394)');
is($o->{killed}{error}{type}, 'QUERY_WAS_CANCELLED', '... QUERY_WAS_CANCELLED');
is($o->{after_kill}, 0, 'and it is gone from system.processes');

done_testing();
