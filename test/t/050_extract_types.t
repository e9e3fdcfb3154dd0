# The extraction data plane end to end, against real PostgreSQL and the
# real ClickHouse engine: a source table with every supported type
# (docs/types.md), extreme values, multi-byte UTF-8, bytes 0x00/0x0A,
# duplicate rows, rows exactly on chunk and window boundaries and just
# outside them, and NULL window values.  After dpwin_refresh the target's
# rows inside the window must equal the source's rows inside the window as
# a multiset, compared row by row in a canonical text form that both sides
# render independently (hex bytes for strings, IEEE bits for floats,
# microsecond ticks for timestamps, ...); rows outside the window and with
# a NULL window value must be kept as they were.
#
# Then parallelism 1, 2 and 8 must publish identical content.  The source
# digest is keyed with a fresh random key per invocation (plan.digest_key),
# so the digests of two runs differ by design: instead each run's evidence
# digest must equal ClickHouse's digest of the published window and
# PostgreSQL's digest of the source window (one plain SELECT, no workers)
# under that run's key, and every run must count the same rows.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture psql_ok_long sorted_lines multiset_is bg_psql bg_finish
  hold_source release_source workers_held ch_rows refresh_sql);

my $tag = "t050_$$";
my $db = $tag;                  # ClickHouse database
my $schema = $tag;              # PostgreSQL schema
my $route = "${tag}_r";
my $srv = 'sandbox_ch';
my $src = "$schema.src";
my $tgt = "`$db`.`tgt`";

# The window: [lo, hi) = [09-07, 09-09), 8 chunks of 6 hours.
my $lo = '2026-09-07 00:00:00+00';
my $hi = '2026-09-09 00:00:00+00';
my $ch_lo = "toDateTime64('2026-09-07 00:00:00', 6, 'UTC')";
my $ch_hi = "toDateTime64('2026-09-09 00:00:00', 6, 'UTC')";

# name, PostgreSQL type, NOT NULL?, ClickHouse type, kind
my @cols = (
	[ 'id',  'bigint',           1, 'Int64',                               'int' ],
	[ 'w',   'timestamptz',      0, "Nullable(DateTime64(6, 'UTC'))",      'ts' ],
	[ 'i2',  'smallint',         0, 'Nullable(Int16)',                     'int' ],
	[ 'i4',  'integer',          0, 'Nullable(Int32)',                     'int' ],
	[ 'i8',  'bigint',           0, 'Nullable(Int64)',                     'int' ],
	[ 'i2w', 'smallint',         1, 'Int64',                               'int' ],
	[ 'f4',  'real',             0, 'Nullable(Float32)',                   'f4' ],
	[ 'f4w', 'real',             0, 'Nullable(Float64)',                   'f4w' ],
	[ 'f8',  'double precision', 0, 'Nullable(Float64)',                   'f8' ],
	[ 'n9',  'numeric(9,4)',     0, 'Nullable(Decimal(9, 4))',             'dec' ],
	[ 'n18', 'numeric(18,2)',    0, 'Nullable(Decimal(18, 2))',            'dec' ],
	[ 'n38', 'numeric(38,10)',   0, 'Nullable(Decimal(38, 10))',           'dec' ],
	[ 'n76', 'numeric(76,20)',   0, 'Nullable(Decimal(76, 20))',           'dec' ],
	[ 'nu',  'numeric',          0, 'Nullable(Decimal(38, 10))',           'dec' ],
	[ 'nw',  'numeric(10,2)',    0, 'Nullable(Decimal(20, 5))',            'dec' ],
	[ 'b',   'boolean',          0, 'Nullable(Bool)',                      'bool' ],
	[ 'b8',  'boolean',          1, 'UInt8',                               'bool8' ],
	[ 't',   'text',             0, 'Nullable(String)',                    'str' ],
	[ 'vc',  'varchar(20)',      0, 'Nullable(String)',                    'str' ],
	[ 'ch',  'char(6)',          0, 'Nullable(String)',                    'bpchar6' ],
	[ 'lc',  'text',             0, 'LowCardinality(Nullable(String))',    'str' ],
	[ 'nm',  'name',             1, 'String',                              'str' ],
	[ 'by',  'bytea',            0, 'Nullable(String)',                    'bytea' ],
	[ 'd32', 'date',             0, 'Nullable(Date32)',                    'date' ],
	[ 'd16', 'date',             0, 'Nullable(Date)',                      'date' ],
	[ 'ts',  'timestamptz',      0, "Nullable(DateTime64(6, 'UTC'))",      'ts' ],
	[ 'ts3', 'timestamptz',      0, "Nullable(DateTime64(3, 'UTC'))",      'ts' ],
	[ 'ts0', 'timestamptz',      1, "DateTime64(0, 'UTC')",                'ts' ],
	[ 'tsn', 'timestamp',        0, "Nullable(DateTime64(6, 'UTC'))",      'ts' ],
	[ 'u',   'uuid',             0, 'Nullable(UUID)',                      'uuid' ],
	[ 'j',   'json',             0, 'Nullable(String)',                    'str' ],
	[ 'jb',  'jsonb',            0, 'Nullable(String)',                    'str' ],
	[ 'ai4', 'integer[]',        1, 'Array(Nullable(Int32))',              'arr:int' ],
	[ 'ai8', 'bigint[]',         1, 'Array(Int64)',                        'arr:int' ],
	[ 'at',  'text[]',           1, 'Array(Nullable(String))',             'arr:str' ],
	[ 'ats', 'timestamptz[]',    1, "Array(Nullable(DateTime64(6, 'UTC')))", 'arr:ts' ],
	[ 'an',  'numeric(10,2)[]',  1, 'Array(Nullable(Decimal(10, 2)))',     'arr:dec' ],
	[ 'dm',  "$schema.posint",   0, 'Nullable(Int32)',                     'int' ],
);

# ---- canonical text, rendered independently by each side ---------------

# PostgreSQL: an expression of a non-NULL value $x of the given kind.
sub pg_canon_value
{
	my ($kind, $x) = @_;
	return "${x}::text" if $kind eq 'int';
	return "encode(float4send($x), 'hex')" if $kind eq 'f4';
	return "encode(float8send(${x}::float8), 'hex')" if $kind eq 'f4w';
	return "encode(float8send($x), 'hex')" if $kind eq 'f8';
	return "trim_scale($x)::text" if $kind eq 'dec';
	return "CASE $x WHEN true THEN 'true' WHEN false THEN 'false' END" if $kind eq 'bool';
	return "${x}::int::text" if $kind eq 'bool8';
	return "encode(convert_to(${x}::text, 'UTF8'), 'hex')" if $kind eq 'str';
	# char(n) is written as stored, padded to n characters
	return "encode(convert_to(rpad(${x}::text, 6), 'UTF8'), 'hex')" if $kind eq 'bpchar6';
	return "encode($x, 'hex')" if $kind eq 'bytea';
	return "to_char($x, 'YYYY-MM-DD')" if $kind eq 'date';
	# microseconds since the Unix epoch (a timestamp without zone read as UTC)
	return "(extract(epoch FROM $x) * 1000000)::bigint::text" if $kind eq 'ts';
	return "${x}::text" if $kind eq 'uuid';
	die "kind $kind";
}

sub pg_canon
{
	my ($kind, $c) = @_;
	if ($kind =~ /^arr:(\w+)$/)
	{
		my $e = pg_canon_value($1, 'e');
		return "cardinality($c)::text || ':' || COALESCE((SELECT string_agg(COALESCE($e, 'N'), ',' ORDER BY o)"
		  . " FROM unnest($c) WITH ORDINALITY AS u(e, o)), '')";
	}
	return "COALESCE(" . pg_canon_value($kind, $c) . ", 'N')";
}

# ClickHouse: the same text from the stored value.
sub ch_canon_value
{
	my ($kind, $x) = @_;
	return "toString($x)" if $kind eq 'int' || $kind eq 'dec' || $kind eq 'bool' || $kind eq 'bool8' || $kind eq 'uuid' || $kind eq 'date';
	return "leftPad(lower(hex(reinterpretAsUInt32($x))), 8, '0')" if $kind eq 'f4';
	return "leftPad(lower(hex(reinterpretAsUInt64($x))), 16, '0')" if $kind eq 'f8' || $kind eq 'f4w';
	return "lower(hex($x))" if $kind eq 'str' || $kind eq 'bpchar6' || $kind eq 'bytea';
	return "toString(toUnixTimestamp64Micro($x))" if $kind eq 'ts';
	die "kind $kind";
}

sub ch_canon
{
	my ($kind, $c, $nullable) = @_;
	if ($kind =~ /^arr:(\w+)$/)
	{
		my $e = ch_canon_value($1, 'assumeNotNull(e)');
		return "toString(length($c)) || ':' || arrayStringConcat(arrayMap(e -> if(isNull(e), 'N', $e), $c), ',')";
	}
	return $nullable ? "if(isNull($c), 'N', " . ch_canon_value($kind, "assumeNotNull($c)") . ")"
	  : ch_canon_value($kind, $c);
}

my $pg_row = join(" || '|' || ", map { pg_canon($_->[4], $_->[0]) } @cols);
my $ch_row = join(" || '|' || ",
	map { ch_canon($_->[4], "`$_->[0]`", $_->[3] =~ /Nullable/) } @cols);

# source rows WHERE $where, canonical and sorted
sub pg_rows
{
	my ($table, $where) = @_;
	return sorted_lines(psql_ok_long("SELECT $pg_row FROM $table WHERE $where"));
}

# the target's rows WHERE $where, canonical and sorted
sub tgt_rows
{
	my ($where) = @_;
	return ch_rows('tgt', where => $where, row => $ch_row);
}

my $pg_in = "w >= '$lo' AND w < '$hi'";
my $ch_in = "w >= $ch_lo AND w < $ch_hi";
my $ch_keep = "isNull(w) OR w < $ch_lo OR w >= $ch_hi";

my $refresh_cols = "state, source_rows, final_rows, invocation_id, details->'evidence'->>'source_digest'";

sub refresh
{
	my ($end, $out) = @_;
	$out //= psql_ok_long(refresh_sql($route, $end, undef, $refresh_cols));
	my %r;
	@r{qw(state source_rows final_rows id digest)} = split /\|/, $out;
	$r{key} = psql_ok_long("SELECT plan->>'digest_key' FROM dpwin.invocation WHERE invocation_id = '$r{id}'");
	return \%r;
}

# ---- setup ---------------------------------------------------------------

fresh_fixture($db, $schema);
ch_ok("CREATE TABLE $tgt (" . join(', ', map { "`$_->[0]` $_->[3]" } @cols)
	  . ") ENGINE = MergeTree ORDER BY id");

psql_ok_long("CREATE DOMAIN $schema.posint AS integer CHECK (VALUE > 0);
	CREATE TABLE $src (" . join(', ', map { "$_->[0] $_->[1]" . ($_->[2] ? ' NOT NULL' : '') } @cols) . ");");

# Bulk rows spread over [09-06, 09-10): before, inside and after the window,
# every 97th with a NULL window value; every column NULL now and then.
psql_ok_long(<<"SQL");
INSERT INTO $src
SELECT g,
	CASE WHEN g % 97 = 0 THEN NULL ELSE
		timestamptz '2026-09-06 00:00:00+00' + ((g::bigint * 1152019) % 345600000) * interval '1 millisecond'
			+ (g % 1000) * interval '1 microsecond' END,
	CASE WHEN g % 11 = 0 THEN NULL ELSE ((g * 31) % 65536 - 32768)::smallint END,
	CASE WHEN g % 13 = 0 THEN NULL ELSE ((g::bigint * 2654435761) % 4294967296 - 2147483648)::int END,
	CASE WHEN g % 17 = 0 THEN NULL ELSE g::bigint * 1000000000007 * (CASE WHEN g % 2 = 0 THEN -1 ELSE 1 END) END,
	(g % 32768)::smallint,
	CASE WHEN g % 19 = 0 THEN NULL ELSE (g * 1.1)::real / 7 END,
	(g::real / 3),
	CASE WHEN g % 23 = 0 THEN NULL ELSE g::float8 / 7 * 1e10 END,
	CASE WHEN g % 5 = 0 THEN NULL ELSE (((g::bigint * 37) % 999999999)::numeric / 10000) * (CASE WHEN g % 2 = 0 THEN -1 ELSE 1 END) END,
	(g::bigint * 1234567)::numeric / 100,
	round((g::numeric ^ 5) / 7, 10),
	round(g::numeric * 1e40 / 7, 20),
	g::numeric / 8,
	(g / 3.0)::numeric(10,2),
	CASE WHEN g % 29 = 0 THEN NULL ELSE g % 3 = 0 END,
	g % 2 = 0,
	CASE WHEN g % 31 = 0 THEN NULL ELSE 'row ' || g || repeat('ü日🎉', g % 5) END,
	left(md5(g::text), g % 20),
	chr(65 + g % 26),
	(ARRAY['alpha', 'beta', 'gamma', NULL])[g % 4 + 1],
	'n' || g,
	CASE WHEN g % 37 = 0 THEN NULL ELSE decode(md5(g::text) || '000a0a00', 'hex') END,
	date '1900-01-01' + (g * 53) % 146096,
	date '1970-01-01' + (g * 41) % 65535,
	timestamptz '1900-01-01 00:00:00+00' + ((g::bigint * 1234567891) % 12622780800000000) * interval '1 microsecond',
	timestamptz '2026-01-01 00:00:00+00' + g * interval '1.001 second',
	timestamptz '2026-01-01 00:00:00+00' + g * interval '17 seconds',
	timestamp '2026-01-01 00:00:00' + g * interval '999983 microseconds',
	CASE WHEN g % 41 = 0 THEN NULL ELSE md5(g::text)::uuid END,
	('{"g": ' || g || ',  "s": "ü\\n"}')::json,
	jsonb_build_object('g', g, 'a', jsonb_build_array(1, 'x', NULL)),
	CASE WHEN g % 7 = 0 THEN '{}' ELSE ARRAY[g, NULL, -g] END,
	ARRAY[g::bigint * 3, -9223372036854775808],
	ARRAY['a' || g, NULL, ''],
	ARRAY[timestamptz '2026-09-07 00:00:00+00' + g * interval '1 second', NULL],
	ARRAY[(g / 3.0)::numeric(10,2), NULL],
	CASE WHEN g % 43 = 0 THEN NULL ELSE g END
FROM generate_series(1, 3000) g;
SQL

# Values stored out of line (TOAST): the encoder must detoast them.
psql_ok_long("UPDATE $src SET t = (SELECT string_agg(md5(id::text || x), '') FROM generate_series(1, 600) x),
		by = (SELECT string_agg(decode(md5(id::text || x), 'hex'), ''::bytea) FROM generate_series(1, 900) x),
		jb = (SELECT jsonb_agg(md5(id::text || x)) FROM generate_series(1, 400) x),
		at = ARRAY(SELECT md5(id::text || x) FROM generate_series(1, 400) x)
	WHERE id % 500 = 1");
is(psql_ok_long("SELECT count(*) FROM $src WHERE id % 500 = 1 AND pg_column_size(t) > 2000 AND pg_column_size(by) > 2000"),
	6, 'six rows hold values stored out of line');
is(psql_ok_long("SELECT count(*) FROM $src WHERE id % 500 = 1 AND $pg_in"), 4, '... four of them inside the window');

# Extreme rows: a base row and templates overriding it, each placed on
# every boundary value: each chunk boundary (lo of its chunk, included,
# so it belongs to exactly one chunk), 1 us before and after it, the
# window's own lo and hi (hi excluded) +- 1 us, far outside, and NULL.
my %base = (
	i2 => '1', i4 => '1', i8 => '1', i2w => '1', f4 => '1.5', f4w => '1.5', f8 => '1.5',
	n9 => '1.5', n18 => '1.5', n38 => '1.5', n76 => '1.5', nu => '1.5', nw => '1.5',
	b => 'true', b8 => 'true', t => "'x'", vc => "'x'", ch => "'x'", lc => "'x'",
	nm => "'x'", by => "'\\x78'::bytea", d32 => "'2026-09-07'", d16 => "'2026-09-07'",
	ts => "'2026-09-07 12:00:00+00'", ts3 => "'2026-09-07 12:00:00.5+00'",
	ts0 => "'2026-09-07 12:00:00+00'", tsn => "'2026-09-07 12:00:00'",
	u => "'61f0c404-5cb3-11e7-907b-a6006ad3dba0'", j => "'{\"a\":1}'", jb => "'{\"a\": 1}'",
	ai4 => "'{1}'", ai8 => "'{1}'", at => "'{x}'", ats => "'{\"2026-09-07 00:00:00+00\"}'",
	an => "'{1.5}'", dm => '1',
);
my $nines56 = '9' x 56;
my $nines20 = '9' x 20;
my @templates = (
	{    # maxima
		i2 => '32767', i4 => '2147483647', i8 => '9223372036854775807', i2w => '32767',
		f4 => "'3.4028235e38'", f4w => "'3.4028235e38'", f8 => "'1.7976931348623157e308'",
		n9 => '99999.9999', n18 => '9999999999999999.99',
		n38 => '9999999999999999999999999999.9999999999',
		n76 => "$nines56.$nines20", nu => '9999999999999999999999999999.9999999999',
		nw => '99999999.99',
		t => "repeat('日本語🎉', 100)", vc => "'ÄÖÜäöüß漢字🎉ÄÖÜäöüß漢字🎉ab'", ch => "'日本語🎉'",
		lc => "'beta'", nm => "repeat('x', 63)", by => "'\\x00ff0a0a00'::bytea",
		d32 => "'2299-12-31'", d16 => "'2149-06-06'",
		ts => "'2299-12-31 23:59:59.999999+00'", ts3 => "'2299-12-31 23:59:59.999+00'",
		ts0 => "'2299-12-31 23:59:59+00'", tsn => "'2299-12-31 23:59:59.999999'",
		u => "'ffffffff-ffff-ffff-ffff-ffffffffffff'", j => "'{\"big\": 1e308, \"u\": \"\\u00fc\"}'",
		jb => "'{\"k\": \"日本\", \"z\": [1.50, null]}'",
		ai4 => "'{2147483647,NULL,-2147483648}'", ai8 => "'{9223372036854775807}'",
		at => "ARRAY['日本', NULL, '']", ats => "'{\"2299-12-31 23:59:59.999999+00\",NULL}'",
		an => "'{99999999.99,NULL,-99999999.99}'", dm => '2147483647',
	},
	{    # minima
		i2 => '-32768', i4 => '-2147483648', i8 => '-9223372036854775808', i2w => '-32768',
		f4 => "'1.4e-45'", f4w => "'-3.4028235e38'", f8 => "'4.9406564584124654e-324'",
		n9 => '-99999.9999', n18 => '-9999999999999999.99',
		n38 => '-9999999999999999999999999999.9999999999',
		n76 => "-$nines56.$nines20", nu => '-0.0000000001', nw => '-99999999.99',
		b => 'false', b8 => 'false', t => "''", vc => "''", ch => "''", lc => "''", nm => "''",
		by => "'\\x'::bytea", d32 => "'1900-01-01'", d16 => "'1970-01-01'",
		ts => "'1900-01-01 00:00:00+00'", ts3 => "'1900-01-01 00:00:00+00'",
		ts0 => "'1900-01-01 00:00:00+00'", tsn => "'1900-01-01 00:00:00'",
		u => "'00000000-0000-0000-0000-000000000000'", j => "'[]'", jb => "'{}'",
		ai4 => "'{}'", ai8 => "'{}'", at => "'{}'", ats => "'{}'", an => "'{}'", dm => '1',
	},
	{    # NULL wherever allowed; NULL array elements
		map({ $_->[2] ? () : ($_->[0] => 'NULL') } @cols[ 2 .. $#cols ]),
		i2w => '0', b8 => 'false', nm => "'null'", ts0 => "'1970-01-01 00:00:00+00'",
		ai4 => "'{NULL}'", ai8 => "'{0}'", at => "'{NULL,NULL}'", ats => "'{NULL}'", an => "'{NULL}'",
	},
	{    # NaN, infinities, escapes, lower bounds, negative ticks
		f4 => "'NaN'", f4w => "'Infinity'", f8 => "'NaN'",
		i2 => '0', i4 => '0', i8 => '0', n9 => '0', n18 => '0.01', n38 => '-0.0000000001',
		n76 => '0.00000000000000000001', nu => '0', nw => '0.01',
		t => "E'tab\\tnewline\\nbackslash\\\\ quote'' pipe|'", vc => "'a|b'", ch => "'ab  '",
		lc => 'NULL', nm => "'ü'", by => "'\\x0a'::bytea", d32 => "'1970-01-01'", d16 => "'2000-02-29'",
		ts => "'1969-12-31 23:59:59.999999+00'", ts3 => "'1969-12-31 23:59:59.999+00'",
		ts0 => "'1969-12-31 23:59:59+00'", tsn => "'2000-02-29 12:00:00'",
		j => "'  {\"a\" :1,\"a\":2}  '", jb => "'[1, \"a\", {\"b\": null}]'",
		ai4 => "'[2:3]={7,8}'", ai8 => "'{-1,0,1}'", at => "ARRAY['a,b', E'line\\nbreak', 'ü', 'N']",
		ats => "ARRAY[timestamptz '1900-01-01 00:00:00+00']", an => "ARRAY[0.01]", dm => '5',
	},
	{    # the other infinities, negative zeros
		f4 => "'-Infinity'", f4w => "'NaN'", f8 => "'-Infinity'",
		t => "'🎉'", by => "'\\x000a'::bytea",
	},
	{ f4 => "'-0'", f4w => "'-0'", f8 => "'-0'", t => "E'\\n\\n'", by => "'\\x0a0a'::bytea" },
);

my @bounds;
for my $k (0 .. 8)
{
	my $b = "timestamptz '$lo' + interval '6 hours' * $k";
	push @bounds, "$b - interval '1 microsecond'", $b, "$b + interval '1 microsecond'";
}
push @bounds, "timestamptz '$lo' - interval '1 day'", "timestamptz '$hi' + interval '1 day'",
  'NULL', 'NULL';

my @values;
my $id = 100000;
for my $t (@templates)
{
	for my $b (@bounds)
	{
		$id++;
		my %v = (%base, %$t);
		push @values, "($id, $b, "
		  . join(', ', map { "($v{$_->[0]})::$_->[1]" } @cols[ 2 .. $#cols ]) . ")";
	}
}
psql_ok_long("INSERT INTO $src VALUES\n" . join(",\n", @values));

# Exact duplicates: every 50th bulk row, and the extreme rows on even
# boundaries, twice more or once more.
psql_ok_long("INSERT INTO $src SELECT * FROM $src WHERE id % 50 = 0;
	INSERT INTO $src SELECT * FROM $src WHERE id % 100 = 0 AND id < 100000;
	INSERT INTO $src SELECT * FROM $src WHERE id > 100000 AND id % 2 = 0;");

my $nsrc_in = psql_ok_long("SELECT count(*) FROM $src WHERE $pg_in");
my $ndup_in = psql_ok_long("SELECT count(*) - count(DISTINCT ($pg_row)) FROM $src WHERE $pg_in");
cmp_ok($nsrc_in, '>', 1500, "source has $nsrc_in rows inside the window");
cmp_ok($ndup_in, '>', 50, "... $ndup_in of them duplicates");
is(psql_ok_long("SELECT count(DISTINCT w) FROM $src WHERE w IN (SELECT timestamptz '$lo' + interval '6 hours' * k FROM generate_series(0, 8) k)"),
	9, 'the source has rows on every chunk boundary, lo and hi included');

# the index the source barrier locks (DpwinFixture::hold_source)
psql_ok_long("CREATE INDEX src_barrier ON $src (id)");
psql_ok_long("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', 'tgt',
	interval '2 days', interval '6 hours', parallelism => 3, batch_rows => 100)");
is(psql_ok_long("SELECT count(*) FROM dpwin.plan('$route', '$hi')"), 8, 'the window has 8 chunks');

# ---- prepare a target with rows outside the window ----------------------

# rows before the window, rows after it, a stale version of the window
for my $end ('2026-09-07 00:00:00+00', '2026-09-11 00:00:00+00', $hi)
{
	my $r = refresh($end);
	is($r->{state}, 'completed', "preparing refresh up to $end completed");
}
multiset_is(tgt_rows($ch_in), pg_rows($src, $pg_in), 'the first refresh of the window is exact');

# The source changes inside the window (and outside it, where the target
# must not follow); the target gets NULL-window rows (with duplicates)
# and rows that are not in the source at all.
psql_ok_long("UPDATE $src SET t = 'updated ' || id, f8 = -f8 WHERE id % 7 = 3 AND id < 100000;
	DELETE FROM $src WHERE id % 7 = 5 AND id < 100000;
	INSERT INTO $src SELECT id + 200000, w + interval '1 hour', i2, i4, i8, i2w, f4, f4w, f8, n9, n18, n38, n76, nu, nw,
		b, b8, t, vc, ch, lc, nm, by, d32, d16, ts, ts3, ts0, tsn, u, j, jb, ai4, ai8, at, ats, an, dm
	  FROM $src WHERE id % 9 = 4;");
ch_ok("INSERT INTO $tgt SELECT * REPLACE (NULL AS w) FROM $tgt WHERE id % 40 = 1");
ch_ok("INSERT INTO $tgt SELECT * REPLACE (NULL AS w) FROM $tgt WHERE id % 80 = 1");
ch_ok("INSERT INTO $tgt SELECT * REPLACE (id + 900000 AS id) FROM $tgt WHERE ($ch_in) AND id % 10 = 1");

my $keep_before = tgt_rows($ch_keep);
my $nnull = ch_ok("SELECT count() FROM $tgt WHERE isNull(w)");
chomp $nnull;
cmp_ok($nnull, '>', 50, "target has $nnull NULL-window rows");
cmp_ok(scalar(@$keep_before), '>', 1000, 'target has ' . scalar(@$keep_before) . ' rows outside the window or NULL');

# ---- the refresh under test ---------------------------------------------

my $uuid_before = ch_ok("SELECT toString(uuid) FROM system.tables WHERE database = '$db' AND name = 'tgt'");
my $r = refresh($hi);
is($r->{state}, 'completed', 'refresh completed');
my $exp_in = pg_rows($src, $pg_in);
is($r->{source_rows}, scalar(@$exp_in), 'source_rows is the number of source rows in the window');
multiset_is(tgt_rows($ch_in), $exp_in,
	'target rows inside the window == source rows inside the window (multiset, every column)');
multiset_is(tgt_rows($ch_keep), $keep_before,
	'target rows outside the window and NULL-window rows are kept exactly');
is($r->{final_rows}, @$exp_in + @$keep_before, 'final_rows = window rows + kept rows');
isnt(ch_ok("SELECT toString(uuid) FROM system.tables WHERE database = '$db' AND name = 'tgt'"),
	$uuid_before, 'the target is a new generation');

# Each chunk boundary belongs to exactly one chunk: its rows are copied once.
for my $k (0 .. 7)
{
	my $pgb = "timestamptz '$lo' + interval '6 hours' * $k";
	my $n_src = psql_ok_long("SELECT count(*) FROM $src WHERE w = $pgb");
	my $n_tgt = ch_ok("SELECT count() FROM $tgt WHERE w = $ch_lo + toIntervalHour(6 * $k)");
	chomp $n_tgt;
	is($n_tgt, $n_src, "chunk boundary $k: $n_src rows, each copied once");
}


# Chunk journal: every chunk verified at its first attempt, rows add up.
is(psql_ok_long("SELECT count(*) FILTER (WHERE state = 'verified' AND attempt = 0), sum(rows)
	FROM dpwin.chunks WHERE invocation_id = '$r->{id}'"),
	"8|" . scalar(@$exp_in), 'chunk journal: 8 chunks verified at attempt 0, rows add up');

# No staging or generation table is left behind.
is(ch_ok("SELECT count() FROM system.tables WHERE database = '$db' AND (name LIKE '%\\_stg\\_%' OR name LIKE '%\\_gen')") + 0,
	0, 'no staging or generation tables left');

# ---- parallelism 1, 2 and 8 publish the same content ---------------------

my $full_ref = tgt_rows('1');

# The digest of the published window, computed by ClickHouse under a key,
# by the definition in docs/design.md ("Why this is exact"), not with
# dpwin's select list: for a "sip128:" key the 128-bit hash as one number,
# its low and high 64 bits summed apart; for a four-number key the two
# 64-bit hashes.
sub ch_window_digest
{
	my ($key) = @_;
	my $quoted = join(', ', map { "`$_->[0]`" } @cols);
	my $sql;
	if ($key =~ /^sip128:(\d+):(\d+)$/)
	{
		$sql = "SELECT count(), sum(toUInt64(bitAnd(h, toUInt128('18446744073709551615')))),"
		  . " sum(toUInt64(bitShiftRight(h, 64)))"
		  . " FROM (SELECT reinterpretAsUInt128(sipHash128ReferenceKeyed((toUInt64($1), toUInt64($2)),"
		  . " formatRow('RowBinary', $quoted))) AS h FROM $tgt WHERE $ch_in)";
	}
	else
	{
		my @k = split /:/, $key;
		$sql = "SELECT count(), sum(sipHash64Keyed((toUInt64($k[0]), toUInt64($k[1])), formatRow('RowBinary', $quoted))),"
		  . " sum(sipHash64Keyed((toUInt64($k[2]), toUInt64($k[3])), formatRow('RowBinary', $quoted)))"
		  . " FROM $tgt WHERE $ch_in";
	}
	my $d = ch_ok($sql);
	chomp $d;
	return join(':', split /\t/, $d);
}

# The same digest computed in PostgreSQL straight from the source table,
# one statement, no workers, no chunks.
sub pg_window_digest
{
	my ($key) = @_;
	my $row = join(' || ', map {
		my $t = $_->[3] =~ s/'/''/gr;
		"dpwin_test.encode_rowbinary($_->[0], '$t')"
	} @cols);
	return psql_ok_long("SELECT dpwin_test.digest_rows('$key', array_agg($row)) FROM $src WHERE $pg_in");
}

like($r->{key}, qr/^sip128:\d+:\d+$/, 'a new invocation digests under a SipHash-128 key');
is(ch_window_digest($r->{key}), $r->{digest},
	'the evidence source digest is the digest of the published window');

my %digest_counts;
for my $p (1, 2, 8)
{
	psql_ok_long("SELECT dpwin.alter_route('$route', parallelism => $p)");
	# The chunk workers stop at the source barrier: $p of them, no more,
	# each in a chunk of its own, wait there at once.
	my $inv = psql_ok('SELECT gen_random_uuid()');
	my $barrier = hold_source($src, 'src_barrier');
	my $h = bg_psql(refresh_sql($route, $hi, $inv, $refresh_cols));
	my @held = workers_held($inv, $p);
	is(scalar(@held), $p, "parallelism $p: $p workers read the source at once");
	my $more = psql_ok("SELECT count(*) FROM dpwin.chunk WHERE invocation_id = '$inv' AND state = 'running'");
	is($more, $p, "parallelism $p: and no more chunks run");
	release_source($barrier);
	my ($brc, $bout, $berr) = bg_finish($h);
	die "the refresh at parallelism $p failed: $berr" if $brc;
	my $rp = refresh($hi, $bout);
	is($rp->{state}, 'completed', "parallelism $p: completed");
	multiset_is(tgt_rows('1'), $full_ref, "parallelism $p: the whole target is identical");
	is($rp->{digest}, ch_window_digest($rp->{key}),
		"parallelism $p: source digest $rp->{digest} is ClickHouse's digest of the published window");
	is($rp->{digest}, pg_window_digest($rp->{key}),
		"parallelism $p: ... and PostgreSQL's digest of the source window under the same key");
	my ($cnt) = split /:/, $rp->{digest};
	$digest_counts{$cnt}++;
	is(psql_ok_long("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$rp->{id}' AND state = 'verified'"),
		8, "parallelism $p: 8 chunks verified");
	my $pids = psql_ok_long("SELECT count(DISTINCT worker_pid) FROM dpwin.chunks WHERE invocation_id = '$rp->{id}'");
	cmp_ok($pids, '<=', $p, "parallelism $p: $pids distinct workers");
}
is(scalar(keys %digest_counts), 1, 'every parallelism digested the same number of rows');

# The comparison itself notices a one-byte or one-bit difference: the
# published target against the source with one value changed (rolled back).
my $final = tgt_rows($ch_in);
for my $change ("by = by || '\\x00'::bytea", "f8 = CASE WHEN f8 = 0 THEN '-0'::float8 ELSE 0 END",
	"ts = ts + interval '1 microsecond'", "t = t || ' '")
{
	my $mutated = sorted_lines(psql_ok_long("BEGIN;
		UPDATE $src SET $change WHERE id = (SELECT min(id) FROM $src WHERE $pg_in AND by IS NOT NULL AND t IS NOT NULL AND ts IS NOT NULL AND f8 IS NOT NULL);
		SELECT $pg_row FROM $src WHERE $pg_in;
		ROLLBACK;"));
	my %d;
	$d{$_}++ for @$final;
	$d{$_}-- for @$mutated;
	is(scalar(grep { $d{$_} } keys %d), 2, "the comparison detects a change of one value ($change)");
}

# ---- clean up -------------------------------------------------------------

psql_ok_long("SELECT dpwin.drop_route('$route')");
drop_fixture();

done_testing();
