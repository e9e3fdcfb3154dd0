# Data at the edges, end to end: raw binary noise (bytea, every byte value,
# and NUL-free noise), valid but unusual UTF-8 text (4-byte characters,
# control characters 0x01-0x1F and 0x7F, noncharacters, combining marks,
# the largest code point), 1 MB values (text and bytea, with
# max_encoded_bytes large enough, and refused with 54000 when it is not),
# numeric at the edge of Decimal precision (18 and 38 digits, integral and
# all-fraction scales), timestamps on microsecond boundaries, and the window
# column at both limits of DateTime64(6): 1900-01-01 00:00:00 and
# 2299-12-31 23:59:59.999999.  After each refresh the target's window must
# equal the source's window as a multiset, every value compared in a
# canonical form both sides render independently (hex for bytes, an MD5
# and the length for the 1 MB values, decimal text, microsecond ticks).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture psql_ok_long sorted_lines multiset_is);

my $tag = "t082_$$";
my $db = $tag;
my $schema = $tag;
my $src = "$schema.src";
my $tgt = "`$db`.`tgt`";
my $route = "${tag}_r";
my $srv = 'sandbox_ch';

# name, PostgreSQL type, ClickHouse type, kind
my @cols = (
	[ 'id',  'bigint NOT NULL', 'Int64',                          'int' ],
	[ 'w',   'timestamptz',     "Nullable(DateTime64(6, 'UTC'))", 'ts' ],
	[ 'bn',  'bytea',           'Nullable(String)',               'hex' ],
	[ 't',   'text',            'Nullable(String)',               'hex' ],
	[ 'big', 'text',            'Nullable(String)',               'md5' ],
	[ 'bb',  'bytea',           'Nullable(String)',               'md5' ],
	[ 'd18', 'numeric(18,0)',   'Nullable(Decimal(18, 0))',       'dec' ],
	[ 'f18', 'numeric(18,18)',  'Nullable(Decimal(18, 18))',      'dec' ],
	[ 'm18', 'numeric(18,9)',   'Nullable(Decimal(18, 9))',       'dec' ],
	[ 'd38', 'numeric(38,0)',   'Nullable(Decimal(38, 0))',       'dec' ],
	[ 'f38', 'numeric(38,38)',  'Nullable(Decimal(38, 38))',      'dec' ],
	[ 'm38', 'numeric(38,19)',  'Nullable(Decimal(38, 19))',      'dec' ],
	[ 'ts',  'timestamptz',     "Nullable(DateTime64(6, 'UTC'))", 'ts' ],
);

sub pg_canon
{
	my ($kind, $c, $type) = @_;
	my $bytes = $type =~ /^bytea/ ? $c : "convert_to($c, 'UTF8')";
	my $v = $kind eq 'int' ? "${c}::text"
	  : $kind eq 'ts' ? "(extract(epoch FROM $c) * 1000000)::bigint::text"
	  : $kind eq 'hex' ? "encode($bytes, 'hex')"
	  : $kind eq 'md5' ? "octet_length($bytes) || ':' || md5($bytes)"
	  : $kind eq 'dec' ? "trim_scale($c)::text"
	  : die;
	return "COALESCE($v, 'N')";
}

sub ch_canon
{
	my ($kind, $c) = @_;
	my $x = "assumeNotNull(`$c`)";
	my $v = $kind eq 'int' ? "toString($x)"
	  : $kind eq 'ts' ? "toString(toUnixTimestamp64Micro($x))"
	  : $kind eq 'hex' ? "lower(hex($x))"
	  : $kind eq 'md5' ? "concat(toString(length($x)), ':', lower(hex(MD5($x))))"
	  : $kind eq 'dec' ? "toString($x)"
	  : die;
	return $kind eq 'int' ? $v : "if(isNull(`$c`), 'N', $v)";
}

my $pg_row = join(" || '|' || ", map { pg_canon($_->[3], $_->[0], $_->[1]) } @cols);
my $ch_row = join(", '|', ", map { ch_canon($_->[3], $_->[0]) } @cols);

# The window [end - 1 day, end) on both sides.
sub window_rows
{
	my ($end_pg, $end_ch) = @_;
	my $pg_rows = sorted_lines(psql_ok_long("SELECT $pg_row FROM $src WHERE w >= timestamptz '$end_pg' - interval '1 day' AND w < '$end_pg'"));
	my $ch_rows = sorted_lines(ch_ok("SELECT concat($ch_row) FROM $tgt WHERE w >= toDateTime64('$end_ch', 6, 'UTC') - INTERVAL 1 DAY"
		  . " AND w < toDateTime64('$end_ch', 6, 'UTC')"));
	return ($ch_rows, $pg_rows);
}

sub refresh
{
	my ($end) = @_;
	my $out = psql_ok_long("SELECT state, source_rows, final_rows FROM dpwin_refresh('$route', '$end')");
	my %r;
	@r{qw(state source_rows final_rows)} = split /\|/, $out;
	return \%r;
}

# ---- setup ---------------------------------------------------------------------

fresh_fixture($db, $schema);
ch_ok("CREATE TABLE $tgt (" . join(', ', map { "`$_->[0]` $_->[2]" } @cols) . ") ENGINE = MergeTree ORDER BY id");

psql_ok_long("CREATE TABLE $src (" . join(', ', map { "$_->[0] $_->[1]" } @cols) . ");
	-- n random bytes from lo to 255
	CREATE FUNCTION $schema.noise(n int, lo int) RETURNS bytea LANGUAGE sql VOLATILE AS
	  \$\$ SELECT decode(string_agg(lpad(to_hex(lo + floor(random() * (256 - lo))::int), 2, '0'), ''), 'hex')
	       FROM generate_series(1, n) \$\$;
	-- n random code points from every UTF-8 length class, controls included
	CREATE FUNCTION $schema.utf8_noise(n int) RETURNS text LANGUAGE sql VOLATILE AS
	  \$\$ SELECT string_agg(chr(CASE k
			WHEN 0 THEN 1 + floor(random() * 31)::int                 -- controls 0x01-0x1F
			WHEN 1 THEN 32 + floor(random() * 96)::int                -- ASCII incl. 0x7F
			WHEN 2 THEN 128 + floor(random() * 1920)::int             -- 2 bytes
			WHEN 3 THEN 2048 + floor(random() * 53248)::int           -- 3 bytes below the surrogates
			WHEN 4 THEN 57344 + floor(random() * 8192)::int           -- 3 bytes above them
			ELSE 65536 + floor(random() * 1048576)::int               -- 4 bytes
		END), '')
	  FROM (SELECT floor(random() * 6)::int AS k FROM generate_series(1, n)) s \$\$;
	SELECT setseed(0.082);");

# the 2026 window [09-08, 09-09), cut in 6-hour chunks
my $end = '2026-09-09 00:00:00+00';
my @edge_ts = (
	"'2026-09-08 00:00:00+00'", "'2026-09-08 00:00:00.000001+00'",
	"'2026-09-08 05:59:59.999999+00'", "'2026-09-08 06:00:00+00'", "'2026-09-08 06:00:00.000001+00'",
	"'2026-09-08 11:59:59.999999+00'", "'2026-09-08 12:00:00+00'",
	"'2026-09-08 23:59:59.999999+00'",
	# just outside: not copied
	"'2026-09-07 23:59:59.999999+00'", "'2026-09-09 00:00:00+00'",
);
my $n18 = '9' x 18;
my $n38 = '9' x 38;
my @numeric = (
	# d18, f18, m18, d38, f38, m38
	[ $n18, "0.$n18", '999999999.999999999', $n38, "0.$n38", ('9' x 19) . '.' . ('9' x 19) ],
	[ "-$n18", "-0.$n18", '-999999999.999999999', "-$n38", "-0.$n38", '-' . ('9' x 19) . '.' . ('9' x 19) ],
	[ '1', '0.' . ('0' x 17) . '1', '0.000000001', '1', '0.' . ('0' x 37) . '1', '0.' . ('0' x 18) . '1' ],
	[ '-1', '-0.' . ('0' x 17) . '1', '-0.000000001', '-1', '-0.' . ('0' x 37) . '1', '-0.' . ('0' x 18) . '1' ],
	[ '0', '0', '0', '0', '0', '0' ],
	[ '100000000000000000', '0.5', '123456789.123456789', '10000000000000000000000000000000000000',
	  '0.12345678901234567890123456789012345678', '1234567890123456789.1234567890123456789' ],
	[ 'NULL', 'NULL', 'NULL', 'NULL', 'NULL', 'NULL' ],
);
my @ts_values = (
	"'1900-01-01 00:00:00+00'", "'1900-01-01 00:00:00.000001+00'", "'2299-12-31 23:59:59.999999+00'",
	"'2299-12-31 23:59:59.999998+00'", "'1969-12-31 23:59:59.999999+00'", "'1970-01-01 00:00:00+00'",
	"'1970-01-01 00:00:00.000001+00'", "'1999-12-31 23:59:59.999999+00'", "'2000-01-01 00:00:00+00'",
	"'2000-01-01 00:00:00.000001+00'", "'2038-01-19 03:14:07.999999+00'", "'2038-01-19 03:14:08+00'",
	"'2106-02-07 06:28:15.999999+00'", "'2106-02-07 06:28:16+00'", "'2149-06-06 23:59:59.999999+00'",
	"'2149-06-07 00:00:00+00'", "NULL",
);

my @texts = (
	"E'\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\x09\\x0a\\x0b\\x0c\\x0d\\x0e\\x0f\\x10\\x11\\x12\\x13\\x14\\x15\\x16\\x17\\x18\\x19\\x1a\\x1b\\x1c\\x1d\\x1e\\x1f\\x7f'",
	"U&'\\+01F600\\+01F468\\200D\\+01F469\\200D\\+01F467 e\\0301 \\FEFF\\FFFE\\FFFF \\+10FFFF \\+0E0001'",
	"U&'\\0080\\07FF\\0800\\D7FF\\E000\\FFFD'",
	"E'\\\\N\\t\\\\t \\n\\n\\r\\n '' \" ` ; -- /* */'",
	"''",
	"NULL",
);

my @rows;
my $id = 0;
for my $w (@edge_ts)
{
	for my $i (0 .. $#numeric)
	{
		$id++;
		my $nums = join(', ', map { $numeric[$i][$_] eq 'NULL' ? 'NULL' : $numeric[$i][$_] } 0 .. 5);
		my $t = $texts[ $id % @texts ];
		my $ts = $ts_values[ $id % @ts_values ];
		push @rows, "($id, $w, $schema.noise(1 + $id % 97, $id % 2), $t, NULL, NULL, $nums, $ts)";
	}
}
psql_ok_long("INSERT INTO $src VALUES\n" . join(",\n", @rows));

# bulk noise inside the window: binary and UTF-8 noise of every length up
# to a few kB, every timestamp edge in the ts column
psql_ok_long("INSERT INTO $src (id, w, bn, t, d18, f18, m18, d38, f38, m38, ts)
	SELECT 1000 + g,
		   timestamptz '2026-09-08 00:00:00+00' + (g * 86399999999::bigint / 600) * interval '1 microsecond',
		   CASE WHEN g % 10 = 0 THEN NULL ELSE $schema.noise(g * 7 % 4096, CASE WHEN g % 2 = 0 THEN 1 ELSE 0 END) END,
		   CASE WHEN g % 15 = 0 THEN NULL ELSE $schema.utf8_noise(g * 5 % 1500) END,
		   (g::numeric * 1234567890123) % 999999999999999999,
		   round(random()::numeric, 18),
		   round((random() * 1e9)::numeric, 9),
		   (g::numeric ^ 13) % 99999999999999999999999999999999999999,
		   round(random()::numeric, 38),
		   round((random() * 1e19)::numeric, 19),
		   timestamptz '1900-01-01 00:00:00+00' + floor(random() * 12622780799999000)::bigint * interval '1 microsecond'
	  FROM generate_series(1, 600) g");

# 1 MB values: ASCII, 4-byte characters, UTF-8 noise, binary noise
psql_ok_long("INSERT INTO $src (id, w, big, bb) VALUES
	(5001, '2026-09-08 01:00:00+00', repeat('x', 1048576), NULL),
	(5002, '2026-09-08 02:00:00+00', repeat(U&'\\+01F389', 262144), NULL),
	(5003, '2026-09-08 03:00:00+00', (SELECT string_agg($schema.utf8_noise(1000), '') FROM generate_series(1, 450)), $schema.noise(1048576, 0)),
	(5004, '2026-09-08 04:00:00+00', NULL, $schema.noise(1048576, 1))");
is(psql_ok_long("SELECT count(*) FROM $src WHERE octet_length(big) >= 1048576 OR octet_length(bb) >= 1048576"), 4,
	'four source rows carry values of 1 MB or more');
is(psql_ok_long("SELECT count(*) FROM $src WHERE t ~ '[\\x01-\\x1f]'") > 0 ? 1 : 0, 1, 'the source has control characters in text');
is(psql_ok_long("SELECT count(*) FROM $src WHERE t ~ '[\\U00010000-\\U0010FFFF]'") > 0 ? 1 : 0, 1, 'the source has 4-byte UTF-8 characters');
is(psql_ok_long("SELECT count(*) FROM $src WHERE position('\\x00'::bytea IN bn) > 0") > 0 ? 1 : 0, 1, 'the source has NUL bytes in bytea');

# the window column at the limits of DateTime64(6)
psql_ok_long("INSERT INTO $src (id, w, t, ts) VALUES
	(9001, '1900-01-01 00:00:00+00', 'first instant', '1900-01-01 00:00:00+00'),
	(9002, '1900-01-01 00:00:00.000001+00', 'second instant', NULL),
	(9003, '1900-01-01 23:59:59.999999+00', 'last of the first day', NULL),
	(9004, '1900-01-02 00:00:00+00', 'outside the first window', NULL),
	(9011, '2299-12-31 00:00:00+00', 'first of the last day', NULL),
	(9012, '2299-12-31 23:59:59.999998+00', 'next to last instant', NULL),
	(9013, '2299-12-31 23:59:59.999999+00', 'last instant', '2299-12-31 23:59:59.999999+00'),
	(9014, '2299-12-30 23:59:59.999999+00', 'outside the last window', NULL)");

# duplicates of everything but the 1 MB rows
psql_ok_long("INSERT INTO $src SELECT * FROM $src WHERE id % 5 = 0 AND id < 5000");

# ---- the route; a too small max_encoded_bytes first ------------------------------------

psql_ok_long("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', 'tgt',
	interval '1 day', interval '6 hours', parallelism => 4, batch_rows => 50,
	max_encoded_bytes => 65536)");

# the target has a kept row outside every window and one with a NULL window
ch_ok("INSERT INTO $tgt (id, w, t) VALUES (-1, '2026-01-01 00:00:00', 'kept'), (-2, NULL, 'kept too')");
my $uuid_before = ch_ok("SELECT uuid FROM system.tables WHERE database = '$db' AND name = 'tgt'");

like(psql_err("SELECT * FROM dpwin_refresh('$route', '$end')") // 'ok',
	qr/^54000: a row of chunk \d+ encodes to \d+ bytes, more than max_encoded_bytes \(65536\)/,
	'a 1 MB row is refused (54000) while max_encoded_bytes is 64 kB');
is(ch_ok("SELECT uuid FROM system.tables WHERE database = '$db' AND name = 'tgt'"), $uuid_before,
	'... and the target was not replaced');
is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db'"), "1\n", '... nor left any table behind');

psql_ok_long("SELECT dpwin.alter_route('$route', max_encoded_bytes => 4194304)");

# ---- the refreshes ---------------------------------------------------------------------

my $r = refresh($end);
is($r->{state}, 'completed', 'the 2026 window refreshed');
my $nwin = psql_ok_long("SELECT count(*) FROM $src WHERE w >= timestamptz '$end' - interval '1 day' AND w < '$end'");
is($r->{source_rows}, $nwin, "... reading its $nwin source rows");
my ($got, $exp) = window_rows($end, '2026-09-09 00:00:00');
multiset_is($got, $exp, 'the 2026 window: binary noise, UTF-8 noise, 1 MB values, Decimal(18/38) edges, microsecond boundaries are exact');
is(ch_ok("SELECT count() FROM $tgt WHERE id >= 5001 AND id <= 5004"), "4\n", 'the four 1 MB rows are in the target');

$r = refresh('1900-01-02 00:00:00+00');
is($r->{state}, 'completed', 'the first window of DateTime64 [1900-01-01, 1900-01-02) refreshed');
is($r->{source_rows}, 3, '... with its 3 source rows');
($got, $exp) = window_rows('1900-01-02 00:00:00+00', '1900-01-02 00:00:00');
multiset_is($got, $exp, 'the first window is exact, 1900-01-01 00:00:00 included');

$r = refresh('2300-01-01 00:00:00+00');
is($r->{state}, 'completed', 'the last window of DateTime64 [2299-12-31, 2300-01-01) refreshed');
is($r->{source_rows}, 3, '... with its 3 source rows');
my $last = sorted_lines(ch_ok("SELECT concat($ch_row) FROM $tgt WHERE w >= toDateTime64('2299-12-31 00:00:00', 6, 'UTC')"));
my $last_src = sorted_lines(psql_ok_long("SELECT $pg_row FROM $src WHERE w >= '2299-12-31 00:00:00+00'"));
multiset_is($last, $last_src, 'the last window is exact, 2299-12-31 23:59:59.999999 included');

# evidence of the edge windows counts the right UTC days
is(psql_ok_long("SELECT result->'evidence'->'utc_days'->>'days' FROM dpwin.invocation JOIN dpwin.route USING (route_id)
	WHERE route_name = '$route' AND interval_end = '2300-01-01 00:00:00+00' AND state = 'completed'"),
	'["2299-12-31"]', 'the evidence of the last window names its UTC day 2299-12-31');
is(psql_ok_long("SELECT result->'evidence'->'utc_days'->>'days' FROM dpwin.invocation JOIN dpwin.route USING (route_id)
	WHERE route_name = '$route' AND interval_end = '1900-01-02 00:00:00+00' AND state = 'completed'"),
	'["1900-01-01"]', 'the evidence of the first window names its UTC day 1900-01-01');

# a window without a single row: published as such, its evidence bounds null
{
	my $out = psql_ok_long("SELECT state, source_rows, details->'evidence'->'window_bounds' FROM dpwin_refresh('$route', '2026-10-01 00:00:00+00')");
	is($out, 'completed|0|{"max": null, "min": null, "window_rows": 0, "null_window_rows": 1}',
		'an empty window (the target holds one NULL-window row) refreshes, with null bounds in its evidence');
}

# everything together: every source row in the three windows, the kept rows
my $all_src = sorted_lines(psql_ok_long("SELECT $pg_row FROM $src WHERE (w >= '2026-09-08 00:00:00+00' AND w < '$end')
	OR (w >= '1900-01-01 00:00:00+00' AND w < '1900-01-02 00:00:00+00') OR w >= '2299-12-31 00:00:00+00'"));
my $all_tgt = sorted_lines(ch_ok("SELECT concat($ch_row) FROM $tgt WHERE id >= 0"));
multiset_is($all_tgt, $all_src, 'the whole target equals the three source windows');
is(ch_ok("SELECT arrayStringConcat(groupArray(toString(id)), ',') FROM (SELECT id FROM $tgt WHERE id < 0 ORDER BY id)"),
	"-2,-1\n", 'the row outside every window and the NULL-window row were kept');

# ---- clean up -----------------------------------------------------------------------------

psql_ok_long("SELECT dpwin.drop_route('$route')");
drop_fixture();

done_testing();
