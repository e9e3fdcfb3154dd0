# A real chunk worker fenced by its lease's epoch (src/lease.c,
# docs/design.md): a runner that lost its lease never journals again,
# however late it wakes up.
#
# A refresh is held with both chunk workers inside a chunk (the source
# barrier, DpwinFixture::hold_source): their attempts are journaled
# running and their staging tables exist.  Another session then takes the
# lease over: it commits the epoch bump a coordinator commits when it takes
# the lease (the coordinator still holds the lock, as a runner that was
# paused does not know it lost it).  Released, a worker streams its chunk
# and its next journal write is refused with 55P03, which stops the other:
# no chunk of the invocation is journaled verified, its journal says
# nothing more, and
# the target is untouched.  dpwin.recover() then takes the lease for real,
# marks the invocation snapshot_expired and drops its staging tables, and
# the next refresh completes the window exactly.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture new_event_route create_event_source ch_rows after_refresh
  uuid_of new_uuid route_id invocation_prefix multiset_is dpwin_tables_left bg_psql bg_finish hold_source release_source workers_held);

my $db = "t057_$$";
my $schema = $db;
my $end = '2026-09-09 00:00:00+00';

fresh_fixture($db, $schema);
create_event_source();
my ($route, $t) = new_event_route('fence');
my $uuid = uuid_of($t);
my $before = ch_rows($t);
my $inv = new_uuid();

my $barrier = hold_source("$schema.src", 'src_w');
my $h = bg_psql("SELECT state FROM dpwin_refresh('$route', '$end', '$inv')");
my @pids = workers_held($inv, 2);
is(scalar(@pids), 2, 'both chunk workers are inside a chunk, at the source barrier');
my ($target_id, $epoch) = split /\|/, psql_ok("SELECT target_id, epoch FROM dpwin.lease WHERE holder_invocation = '$inv'");
ok($epoch > 0, "the invocation holds the lease of target $target_id at epoch $epoch");

# The takeover's epoch bump, committed by another session.
is(psql_ok("UPDATE dpwin.lease SET epoch = epoch + 1, holder_pid = pg_backend_pid(), holder_invocation = NULL,"
	  . " acquired_at = clock_timestamp() WHERE target_id = $target_id RETURNING epoch"), $epoch + 1,
	'another session takes the lease over (epoch ' . ($epoch + 1) . ')');
my $seq = ch_log_seq();
release_source($barrier);

my ($rc, $out, $err) = bg_finish($h);
isnt($rc, 0, 'the refresh fails');
like($err, qr/ERROR:\s+55P03: lease epoch \Q$epoch\E of target \Q$target_id\E is stale: this runner was fenced/,
	'... with 55P03: the runner was fenced') or diag($err);
like($err, qr/DETAIL:\s+The target's current epoch is \Q${\ ($epoch + 1)}\E: another runner took the lease\./,
	'... naming the current epoch');
is(psql_ok("SELECT string_agg(chunk_no || ' ' || state, ', ' ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$inv'"),
	'0 running, 1 running, 2 pending, 3 pending',
	'the two attempts stay journaled running: no receipt and no failure was written, no other chunk begun');
my $prefix = invocation_prefix(route_id($route), $inv);
# The first worker refused is one that streamed its chunk and went on to
# journal the next; the other may have stopped on that failure before it
# sent its rows, when it was the slower to read them.
my @streamed = grep {
	my $n = $_;
	grep { $_->{query} =~ /^INSERT INTO `\Q$db\E`\.`\Q${prefix}stg_${n}_0\E` / && $_->{status} eq '200' }
	  ch_log_since($seq)
} (0, 1);
ok(@streamed >= 1, 'a chunk was streamed into its staging table after the takeover: only the journal refused it')
  or diag('streamed: none');
is(psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$inv'"), 'extracting',
	'the invocation journal was not written after the takeover');
is(uuid_of($t), $uuid, 'the target is the same table');
multiset_is(ch_rows($t), $before, 'the target rows are untouched');
ok(wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity WHERE pid IN (" . join(',', @pids) . ")") == 0 }, 30),
	'the fenced workers are gone');

# Recovery takes the lease for real and clears what the fenced runner left.
like(psql_err("SELECT * FROM dpwin.recover('$inv')") // 'recovered',
	qr/^55000: invocation \Q$inv\E cannot be recovered: its snapshot expired before publication/,
	'recover() finds the snapshot expired (55000)');
is(psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$inv'"), 'snapshot_expired',
	'... and marks the invocation snapshot_expired');
cmp_ok(psql_ok("SELECT epoch FROM dpwin.lease WHERE target_id = $target_id"), '>', $epoch + 1,
	'... under a lease of its own (a new epoch)');
is(dpwin_tables_left(), 0, '... and drops the staging tables');

my $expected = after_refresh($before, $end);
is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$end')"), 'completed', 'the next refresh completes');
multiset_is(ch_rows($t), $expected, '... and the target holds the kept rows plus the window, row for row');

drop_fixture();
done_testing();
