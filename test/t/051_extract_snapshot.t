# Every chunk worker reads exactly the snapshot the coordinator exported.
#
# The first staging INSERT of the refresh is held back by the endpoint
# (fault mode=delay), so extraction pauses after the snapshot was exported
# and while most chunks are still unread.  Meanwhile another session
# inserts rows into later chunks, updates rows (also moving them between
# chunks and into the window), deletes rows, and commits.  When the
# refresh completes, none of that may be visible: the target's window must
# equal a copy of the source taken before the changes, row for row, with
# no row read twice or missed.  The next refresh (a new snapshot) must see
# the changes.  Done with parallelism 1 and with parallelism 2 (both
# workers held back) over a partitioned source whose updates move rows
# between partitions.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture pg_row_sql ch_row_sql sorted_lines multiset_diff multiset_is fault ch_rows);
use IPC::Run qw(start finish timeout);
use DpwinEndpoint qw(release wait_running);

my $tag = "t051_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';

my $lo = '2026-03-01 00:00:00+00';
my $hi = '2026-03-03 00:00:00+00';
my $ch_lo = "toDateTime64('2026-03-01 00:00:00', 6, 'UTC')";
my $ch_hi = "toDateTime64('2026-03-03 00:00:00', 6, 'UTC')";
my $pg_in = "w >= '$lo' AND w < '$hi'";
my $ch_in = "w >= $ch_lo AND w < $ch_hi";

my $pg_row = pg_row_sql();
my $ch_row = ch_row_sql();

sub pg_rows { my ($t) = @_; return sorted_lines(psql_ok("SELECT $pg_row FROM $t WHERE $pg_in")); }

fresh_fixture($db, $schema);

# One scenario: a route with the given parallelism over a fresh table.
sub scenario
{
	my ($p, $partitioned) = @_;
	my $src = "$schema.src$p";
	my $before = "$schema.before$p";
	my $route = "${tag}_p$p";
	my $tbl = "tgt$p";
	my $tgt = "`$db`.`$tbl`";

	ch_ok("CREATE TABLE $tgt (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String),"
		  . " n Nullable(Decimal(12, 2))) ENGINE = MergeTree ORDER BY id");

	# 48 chunks of one hour, 100 rows each, plus rows just outside the
	# window on both sides and NULL-window rows.
	my $create = "CREATE TABLE $src (id bigint NOT NULL, w timestamptz, v text, n numeric(12,2))";
	if ($partitioned)
	{
		# half-day partitions over the window, a default one for the rest
		$create .= " PARTITION BY RANGE (w);\n";
		$create .= "CREATE TABLE ${src}_p$_ PARTITION OF $src FOR VALUES FROM"
		  . " ('$lo'::timestamptz + interval '12 hours' * $_) TO ('$lo'::timestamptz + interval '12 hours' * ($_ + 1));\n"
		  for 0 .. 3;
		$create .= "CREATE TABLE ${src}_def PARTITION OF $src DEFAULT";
	}
	psql_ok("$create;
		INSERT INTO $src
		SELECT g, timestamptz '$lo' - interval '2 hours' + g * interval '36 seconds',
			'v' || g || repeat('é', g % 4), (g * 1.25)::numeric(12,2)
		  FROM generate_series(0, 5199) g;
		INSERT INTO $src SELECT g, NULL, 'null window', NULL FROM generate_series(6000, 6009) g;
		CREATE TABLE $before AS SELECT * FROM $src;");
	my $route_id = psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', '$tbl',
		interval '2 days', interval '1 hour', parallelism => $p, batch_rows => 50)");

	# Hold the first staging INSERT of each worker's first chunk on the
	# server.  The invocation id is chosen here, so the staging tables'
	# names are known.
	my $inv = psql_ok("SELECT gen_random_uuid()");
	my $prefix = "_dpwin_${route_id}_" . substr($inv =~ s/-//gr, 0, 12) . '_';
	fault(pattern => "${prefix}stg_${_}_0` (", count => 1, mode => 'hold') for 0 .. $p - 1;

	my ($out, $err) = ('', '');
	my $h = start [ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c',
		"SELECT state FROM dpwin_refresh('$route', '$hi', '$inv')" ],
	  '>', \$out, '2>', \$err, timeout(120);

	# Wait until the workers are inside their first chunks (the snapshot
	# was exported before any worker started).
	my $running = wait_until(sub {
		psql_ok("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$inv' AND state = 'running'") == $p
	}, 30);
	ok($running, "parallelism $p: $p chunks are being extracted");
	ok(wait_running(qr/\Q${prefix}\Estg_\d+_0` \(/, $p, phase => 'holding'),
		"parallelism $p: their first INSERTs wait on the server");
	my $pending_before = psql_ok("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$inv' AND state = 'pending'");

	# Changes from another session, committed while extraction is paused:
	# new rows in later chunks and in the running ones, updates (also moving
	# rows between chunks and into the window from outside), deletes.
	psql_ok("BEGIN;
		INSERT INTO $src SELECT 10000 + g, timestamptz '$lo' + g * interval '17 minutes', 'inserted', 1
		  FROM generate_series(0, 160) g;
		UPDATE $src SET v = 'updated', n = -n WHERE id % 10 = 3 AND $pg_in;
		UPDATE $src SET w = w + interval '25 hours' WHERE id % 10 = 4 AND w < timestamptz '$lo' + interval '20 hours' AND w >= '$lo';
		UPDATE $src SET w = timestamptz '$lo' + interval '30 hours' WHERE w < '$lo';
		UPDATE $src SET w = timestamptz '$lo' + interval '31 hours' WHERE w IS NULL AND id % 2 = 0;
		DELETE FROM $src WHERE id % 10 = 7 AND $pg_in;
		COMMIT;");
	my $pending_after = psql_ok("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$inv' AND state = 'pending'");
	cmp_ok($pending_after, '>=', 48 - 2 * $p,
		"parallelism $p: the changes were committed while $pending_after of 48 chunks were unread (before: $pending_before)");
	is(release("${prefix}stg_"), $p, "parallelism $p: the held INSERTs are released");

	finish($h);
	chomp $out;
	is($out, 'completed', "parallelism $p: the refresh completed") or diag($err);

	my $exp = pg_rows($before);
	my $now = pg_rows($src);
	cmp_ok(scalar(multiset_diff($now, $exp)), '>', 1000,
		"parallelism $p: the source changed in " . scalar(multiset_diff($now, $exp)) . " distinct window rows meanwhile");
	multiset_is(ch_rows($tbl, where => $ch_in, row => $ch_row), $exp,
		"parallelism $p: the target's window is the source as of the snapshot, row for row");
	is(psql_ok("SELECT count(*) FILTER (WHERE state = 'verified'), sum(rows) FROM dpwin.chunks WHERE invocation_id = '$inv'"),
		'48|' . scalar(@$exp), "parallelism $p: 48 chunks verified, their rows add up to the snapshot's");

	# Every chunk read exactly its own rows: each chunk's staged row count
	# is the snapshot's count for its range.
	is(psql_ok("SELECT count(*) FROM dpwin.chunks c WHERE invocation_id = '$inv' AND rows <>
			(SELECT count(*) FROM $before b WHERE b.w >= c.lo AND b.w < c.hi)"),
		0, "parallelism $p: every chunk holds exactly the snapshot's rows of its range");
	is(ch_ok("SELECT count() FROM $tgt WHERE v = 'inserted' OR v = 'updated'") + 0, 0,
		"parallelism $p: no inserted or updated row is visible");

	# A new invocation takes a new snapshot and sees every change.
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi')"), 'completed',
		"parallelism $p: a second refresh completed");
	multiset_is(ch_rows($tbl, where => $ch_in, row => $ch_row), $now, "parallelism $p: ... and its window is the source as it is now");

	psql_ok("SELECT dpwin.drop_route('$route')");
}

scenario(1, 0);
scenario(2, 1);

drop_fixture();

done_testing();
