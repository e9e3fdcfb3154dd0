# Chunk worker memory does not grow with the window.
#
# Two windows of the same shape (8 chunks, parallelism 2), one with 50 000
# rows and one with 500 000, are refreshed while this test polls
# /proc/<pid>/status of the chunk workers (children of this sandbox's
# postmaster whose title says "dpwin chunk worker"): the largest RssAnon
# seen (private memory) and VmHWM (peak resident set, shared buffers
# included, for the record).  The route's max_encoded_bytes (256 kB) is
# below a chunk's encoded size in both windows, so a worker's buffers are
# full in both: what a worker holds must not depend on the window.  The
# assertions: private memory under 16 MB in both (the product's goal), and
# flat -- the large window's within 25% + 2 MB of the small one's, which a
# leak of more than about 8 bytes per row (4 MB over the 450 000 extra rows)
# cannot meet.  Both windows must also arrive exactly (an MD5 over the
# sorted canonical rows on each side).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture postmaster_pid cluster_processes proc_status_kb);
use IPC::Run qw(start pump finish timeout);
use Time::HiRes qw(time usleep);

my $tag = "t054_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';
my $lo = '2026-08-01 00:00:00+00';
my $hi = '2026-08-02 00:00:00+00';
my $ch_in = "w >= toDateTime64('2026-08-01 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-08-02 00:00:00', 6, 'UTC')";
my $goal_kb = 16 * 1024;

my $pg_row = "id::text || '|' || (extract(epoch FROM w) * 1000000)::bigint::text || '|' || encode(convert_to(v, 'UTF8'), 'hex')"
  . " || '|' || trim_scale(n)::text || '|' || u::text";
my $ch_row = "toString(id) || '|' || toString(toUnixTimestamp64Micro(w)) || '|' || lower(hex(v))"
  . " || '|' || toString(n) || '|' || toString(u)";

my $postmaster = postmaster_pid();

# Chunk workers of this sandbox: pid => { hwm => kB, anon => kB }.
sub poll_workers
{
	my ($seen) = @_;
	for my $pid (keys %{ cluster_processes(qr/dpwin chunk worker/, $postmaster) })
	{
		my $hwm = proc_status_kb($pid, 'VmHWM');
		my $anon = proc_status_kb($pid, 'RssAnon');
		my $w = $seen->{$pid} //= { hwm => 0, anon => 0 };
		$w->{hwm} = $hwm if defined $hwm && $hwm > $w->{hwm};
		$w->{anon} = $anon if defined $anon && $anon > $w->{anon};
	}
}

fresh_fixture($db, $schema);

my %figures;
for my $nrows (50_000, 500_000)
{
	my $src = "$schema.s$nrows";
	my $route = "${tag}_$nrows";
	my $tbl = "t$nrows";
	ch_ok("CREATE TABLE `$db`.`$tbl` (id Int64, w DateTime64(6, 'UTC'), v String, n Decimal(12, 2), u UUID)"
		  . " ENGINE = MergeTree ORDER BY id");
	psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz NOT NULL, v text NOT NULL,
			n numeric(12,2) NOT NULL, u uuid NOT NULL);
		INSERT INTO $src SELECT g, timestamptz '$lo' + (g::float8 / $nrows) * interval '1 day',
			'value ' || g || ' ' || repeat('abcdefghij', 1 + g % 8), g * 0.01, md5(g::text)::uuid
		  FROM generate_series(0, $nrows - 1) g;
		CREATE INDEX ON $src (w);
		ANALYZE $src;");
	psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', '$tbl',
		interval '1 day', interval '3 hours', parallelism => 2, max_encoded_bytes => 262144)");

	my %seen;
	my ($out, $err) = ('', '');
	my $t0 = time();
	my $h = start [ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c',
		"SELECT state, source_rows, details->'evidence'->>'encoded_bytes',"
		  . " details->'evidence'->'phases'->>'stage_seconds' FROM dpwin_refresh('$route', '$hi')" ],
	  '>', \$out, '2>', \$err, timeout(180);
	while ($h->pumpable)
	{
		poll_workers(\%seen);
		usleep(10_000);
		$h->pump_nb;
	}
	finish($h);
	my $elapsed = time() - $t0;
	chomp $out;
	my ($state, $rows, $bytes, $stage) = split /\|/, $out;
	is($state, 'completed', "$nrows rows: the refresh completed") or diag($err);
	is($rows, $nrows, "$nrows rows: every row read");

	my $pg_md5 = psql_ok("SELECT md5(string_agg(r, E'\\n' ORDER BY r COLLATE \"C\"))"
		  . " FROM (SELECT $pg_row AS r FROM $src WHERE w >= '$lo' AND w < '$hi') s");
	my $ch_md5 = ch_ok("SELECT lower(hex(MD5(arrayStringConcat(arraySort(groupArray($ch_row)), '\\n'))))"
		  . " FROM `$db`.`$tbl` WHERE $ch_in");
	chomp $ch_md5;
	is($ch_md5, $pg_md5, "$nrows rows: the window is exact (MD5 of the sorted rows on both sides)");

	my @w = values %seen;
	is(scalar(@w), 2, "$nrows rows: two chunk workers observed");
	my $max_hwm = 0;
	my $max_anon = 0;
	for (@w)
	{
		$max_hwm = $_->{hwm} if $_->{hwm} > $max_hwm;
		$max_anon = $_->{anon} if $_->{anon} > $max_anon;
	}
	cmp_ok($max_anon, '<', $goal_kb, "$nrows rows: private memory (RssAnon) of every worker under 16 MB");
	note(sprintf("%d rows, %.1f MB RowBinary: refresh %.2f s (staging %.2f s, %.0f rows/s);"
			. " worker peak VmHWM %s kB, peak RssAnon %s kB",
			$nrows, $bytes / 1048576, $elapsed, $stage, $nrows / $stage,
			join('/', map { $_->{hwm} } @w), join('/', map { $_->{anon} } @w)));
	$figures{$nrows} = { hwm => $max_hwm, anon => $max_anon };
	psql_ok("SELECT dpwin.drop_route('$route')");
}

# Private memory is flat: 10x the rows, at most 25% + 2 MB more.
cmp_ok($figures{500_000}{anon}, '<', 1.25 * $figures{50_000}{anon} + 2048,
	"private memory is flat: $figures{500_000}{anon} kB for 500k rows vs $figures{50_000}{anon} kB for 50k rows");

drop_fixture();

done_testing();
