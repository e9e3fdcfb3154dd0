# RowBinary encoder parity: dpwin's bytes for each supported type and its
# edge values equal ClickHouse's own formatRow('RowBinary', CAST(x AS T));
# fidelity errors carry the documented SQLSTATEs; SipHash-2-4, its 128-bit
# form and the multiset digest agree with ClickHouse's sipHash64Keyed and
# sipHash128ReferenceKeyed.  See
# docs/types.md.
use strict;
use warnings;
use Test::More;
use Math::BigInt;
use DpwinTest;
use DpwinFixture qw(pg_literal);

psql_ok("CREATE EXTENSION IF NOT EXISTS dpwin_test CASCADE");

sub trim
{
	my ($s) = @_;
	$s =~ s/\s+\z//;
	return $s;
}

# dpwin's encoding of a PostgreSQL expression as ClickHouse type $type.
sub pg_hex
{
	my ($expr, $type, $setup) = @_;
	my $sql = ($setup // '')
	  . "SELECT upper(encode(dpwin_test.encode_rowbinary($expr, "
	  . pg_literal($type) . "), 'hex'))";
	return psql_ok($sql);
}

# ClickHouse's encoding of CAST($lit AS $type).
sub ch_hex
{
	my ($lit, $type) = @_;
	return trim(ch_ok("SELECT hex(formatRow('RowBinary', CAST($lit AS $type)))"));
}

# [PostgreSQL expression, ClickHouse type, ClickHouse literal]
my @cases = (

	# integers, including widening
	[ '0::int2',         'Int16',  '0' ],
	[ '(-32768)::int2',  'Int16',  '-32768' ],
	[ '32767::int2',     'Int16',  '32767' ],
	[ '(-2)::int2',      'Int32',  '-2' ],
	[ '(-32768)::int2',  'Int64',  '-32768' ],
	[ '(-1)::int2',      'Int128', '-1' ],
	[ '(-2147483648)::int4',          'Int32',  '-2147483648' ],
	[ '2147483647::int4',             'Int32',  '2147483647' ],
	[ '(-2147483648)::int4',          'Int64',  '-2147483648' ],
	[ '(-9223372036854775808)::int8', 'Int64',  '-9223372036854775808' ],
	[ '9223372036854775807::int8',    'Int64',  '9223372036854775807' ],
	[ '(-9223372036854775808)::int8', 'Int128', '-9223372036854775808' ],
	[ '(-1)::int8',                   'Int256', '-1' ],
	[ '9223372036854775807::int8',    'Int256', '9223372036854775807' ],
	[ '42::int4',        'Nullable(Int32)', '42' ],
	[ 'NULL::int4',      'Nullable(Int32)', 'NULL' ],
	[ 'NULL::int8',      'Nullable(Int64)', 'NULL' ],

	# floats: IEEE bytes as they are
	[ "'0'::float4",         'Float32', '0.' ],
	[ "'-0'::float4",        'Float32', '-0.' ],
	[ "'1.5'::float4",       'Float32', '1.5' ],
	[ "'NaN'::float4",       'Float32', 'nan' ],
	[ "'Infinity'::float4",  'Float32', 'inf' ],
	[ "'-Infinity'::float4", 'Float32', '-inf' ],
	[ "'3.4028235e38'::float4", 'Float32', '3.4028235e38' ],
	[ "'1.4e-45'::float4",   'Float32', '1.4e-45' ],
	[ "'1.1'::float4",       'Float64', 'toFloat32(1.1)' ],
	[ "'0'::float8",         'Float64', '0.' ],
	[ "'-0'::float8",        'Float64', '-0.' ],
	[ "'0.1'::float8",       'Float64', '0.1' ],
	[ "'NaN'::float8",       'Float64', 'nan' ],
	[ "'Infinity'::float8",  'Float64', 'inf' ],
	[ "'-Infinity'::float8", 'Float64', '-inf' ],
	[ "'1.7976931348623157e308'::float8", 'Float64', '1.7976931348623157e308' ],
	[ "'5e-324'::float8",    'Float64', '5e-324' ],
	[ "'-2.5'::float8",      'Nullable(Float64)', '-2.5' ],

	# numeric -> Decimal, every width, at the edge of precision
	[ "0::numeric",                      'Decimal(18, 2)', "'0'" ],
	[ "1.5::numeric",                    'Decimal(18, 2)', "'1.5'" ],
	[ "(-1.5)::numeric",                 'Decimal(18, 2)', "'-1.5'" ],
	[ "1.50::numeric",                   'Decimal(18, 2)', "'1.5'" ],
	[ "0.01::numeric",                   'Decimal(18, 2)', "'0.01'" ],
	[ "(-0.01)::numeric",                'Decimal(18, 2)', "'-0.01'" ],
	[ "123::numeric",                    'Decimal(18, 2)', "'123'" ],
	[ "10000::numeric",                  'Decimal(18, 2)', "'10000'" ],
	[ "100000000.00::numeric",           'Decimal(18, 2)', "'100000000'" ],
	[ "9999999999999999.99::numeric",    'Decimal(18, 2)', "'9999999999999999.99'" ],
	[ "(-9999999999999999.99)::numeric", 'Decimal(18, 2)', "'-9999999999999999.99'" ],
	[ "12345.67::numeric(7,2)",          'Decimal(18, 2)', "'12345.67'" ],
	[ "12345.6::numeric(10,4)",          'Decimal(18, 2)', "'12345.6'" ],
	[ "999999999999999999::numeric",     'Decimal(18, 0)', "'999999999999999999'" ],
	[ "0.123456789012345678::numeric",   'Decimal(18, 18)', "'0.123456789012345678'" ],
	[ "(-0.000000000000000001)::numeric", 'Decimal(18, 18)', "'-0.000000000000000001'" ],
	[ "9999999.99::numeric",             'Decimal(9, 2)',  "'9999999.99'" ],
	[ "(-9999999.99)::numeric",          'Decimal32(2)',   "'-9999999.99'" ],
	[ "0.9999999999::numeric",           'Decimal(10, 10)', "'0.9999999999'" ],
	[ "1234.5678::numeric",              'Decimal64(4)',   "'1234.5678'" ],
	[ "1234567890123456789012345678.0123456789::numeric", 'Decimal(38, 10)',
		"'1234567890123456789012345678.0123456789'" ],
	[ "(-1234567890123456789012345678.0123456789)::numeric", 'Decimal(38, 10)',
		"'-1234567890123456789012345678.0123456789'" ],
	[ "0.0000000001::numeric",           'Decimal(38, 10)', "'0.0000000001'" ],
	[ "99999999999999999999999999999999999999::numeric", 'Decimal(38, 0)',
		"'99999999999999999999999999999999999999'" ],
	[ "(-99999999999999999999999999999999999999)::numeric", 'Decimal128(0)',
		"'-99999999999999999999999999999999999999'" ],
	[ "18446744073709551616::numeric",   'Decimal(20, 0)', "'18446744073709551616'" ],
	[ "(-1)::numeric",                   'Decimal(38, 3)', "'-1'" ],
	[ "12345678901234567890123456789012345678901234567890123456.12345678901234567890::numeric",
		'Decimal(76, 20)',
		"'12345678901234567890123456789012345678901234567890123456.12345678901234567890'" ],
	[ "(-9999999999999999999999999999999999999999999999999999999999999999999999999999)::numeric",
		'Decimal(76, 0)',
		"'-9999999999999999999999999999999999999999999999999999999999999999999999999999'" ],
	[ "(-0.5)::numeric",                 'Decimal256(30)', "'-0.5'" ],
	[ "3.25::numeric",                   'Nullable(Decimal(18, 2))', "'3.25'" ],
	[ "NULL::numeric",                   'Nullable(Decimal(18, 2))', 'NULL' ],

	# booleans
	[ 'true',  'Bool',  'true' ],
	[ 'false', 'Bool',  'false' ],
	[ 'true',  'UInt8', '1' ],
	[ 'NULL::bool', 'Nullable(Bool)', 'NULL' ],

	# strings
	[ "''::text",                         'String', "''" ],
	[ "'hello'::text",                    'String', "'hello'" ],
	[ "'Grüße, 世界 🎉'::text",            'String', "'Grüße, 世界 🎉'" ],
	[ "E'a\\n\\nb\\n'::text",             'String', "'a\\n\\nb\\n'" ],
	[ "repeat('x', 127)",                 'String', "repeat('x', 127)" ],
	[ "repeat('y', 128)",                 'String', "repeat('y', 128)" ],
	[ "repeat('z', 20000)",               'String', "repeat('z', 20000)" ],
	[ "'varchar'::varchar(20)",           'String', "'varchar'" ],
	[ "'ab'::char(5)",                    'String', "'ab   '" ],
	[ "'a_name'::name",                   'String', "'a_name'" ],
	[ "'\\x000a0aff'::bytea",             'String', "unhex('000A0AFF')" ],
	[ "''::bytea",                        'String', "''" ],
	[ "'{\"b\": 1,  \"a\": [1,2]}'::json", 'String', "'{\"b\": 1,  \"a\": [1,2]}'" ],
	[ "'{\"b\": 1,  \"a\": [1,2]}'::jsonb", 'String', "'{\"a\": [1, 2], \"b\": 1}'" ],
	[ "'low'::text",                      'LowCardinality(String)', "'low'" ],
	[ "'low'::text",                      'LowCardinality(Nullable(String))', "'low'" ],
	[ "NULL::text",                       'LowCardinality(Nullable(String))', 'NULL' ],
	[ "NULL::text",                       'Nullable(String)', 'NULL' ],

	# dates
	[ "'1970-01-01'::date", 'Date32', "'1970-01-01'" ],
	[ "'1969-12-31'::date", 'Date32', "'1969-12-31'" ],
	[ "'1900-01-01'::date", 'Date32', "'1900-01-01'" ],
	[ "'2299-12-31'::date", 'Date32', "'2299-12-31'" ],
	[ "'2026-09-02'::date", 'Date32', "'2026-09-02'" ],
	[ "'1970-01-01'::date", 'Date',   "'1970-01-01'" ],
	[ "'2149-06-06'::date", 'Date',   "'2149-06-06'" ],
	[ "'2026-09-02'::date", 'Nullable(Date)', "'2026-09-02'" ],
	[ "NULL::date",         'Nullable(Date32)', 'NULL' ],

	# timestamps at microsecond boundaries and range limits, p = 0, 3, 6
	[ "'2026-09-02 00:00:00.5+00'::timestamptz",        "DateTime64(6, 'UTC')", "'2026-09-02 00:00:00.5'" ],
	[ "'1970-01-01 00:00:00+00'::timestamptz",          "DateTime64(6, 'UTC')", "'1970-01-01 00:00:00'" ],
	[ "'1969-12-31 23:59:59.999999+00'::timestamptz",   "DateTime64(6, 'UTC')", "'1969-12-31 23:59:59.999999'" ],
	[ "'2000-01-01 00:00:00.000001+00'::timestamptz",   "DateTime64(6, 'UTC')", "'2000-01-01 00:00:00.000001'" ],
	[ "'1900-01-01 00:00:00+00'::timestamptz",          "DateTime64(6, 'UTC')", "'1900-01-01 00:00:00'" ],
	[ "'2299-12-31 23:59:59.999999+00'::timestamptz",   "DateTime64(6, 'UTC')", "'2299-12-31 23:59:59.999999'" ],
	[ "'2026-09-02 12:34:56.789+00'::timestamptz",      "DateTime64(3, 'UTC')", "'2026-09-02 12:34:56.789'" ],
	[ "'1969-12-31 23:59:59.999+00'::timestamptz",      "DateTime64(3, 'UTC')", "'1969-12-31 23:59:59.999'" ],
	[ "'1900-01-01 00:00:00+00'::timestamptz",          "DateTime64(3, 'UTC')", "'1900-01-01 00:00:00'" ],
	[ "'2299-12-31 23:59:59.999+00'::timestamptz",      "DateTime64(3, 'UTC')", "'2299-12-31 23:59:59.999'" ],
	[ "'2026-09-02 12:34:56+00'::timestamptz",          "DateTime64(0, 'UTC')", "'2026-09-02 12:34:56'" ],
	[ "'1969-12-31 23:59:59+00'::timestamptz",          "DateTime64(0, 'UTC')", "'1969-12-31 23:59:59'" ],
	[ "'1900-01-01 00:00:00+00'::timestamptz",          "DateTime64(0, 'UTC')", "'1900-01-01 00:00:00'" ],
	[ "'2299-12-31 23:59:59+00'::timestamptz",          "DateTime64(0, 'UTC')", "'2299-12-31 23:59:59'" ],
	[ "'2026-09-02 12:34:56.1234+00'::timestamptz(4)",  "DateTime64(6, 'UTC')", "'2026-09-02 12:34:56.1234'" ],
	[ "'2026-09-02 12:34:56.123456'::timestamp",        "DateTime64(6, 'UTC')", "'2026-09-02 12:34:56.123456'" ],
	[ "'1900-01-01 00:00:00'::timestamp",               "DateTime64(0, 'UTC')", "'1900-01-01 00:00:00'" ],
	[ "'2026-09-02 00:00:00+00'::timestamptz",          "Nullable(DateTime64(6, 'UTC'))", "'2026-09-02 00:00:00'" ],
	[ "NULL::timestamptz",                              "Nullable(DateTime64(6, 'UTC'))", 'NULL' ],

	# UUID: two little-endian UInt64 halves
	[ "'61f0c404-5cb3-11e7-907b-a6006ad3dba0'::uuid", 'UUID', "'61f0c404-5cb3-11e7-907b-a6006ad3dba0'" ],
	[ "'00000000-0000-0000-0000-000000000000'::uuid", 'UUID', "'00000000-0000-0000-0000-000000000000'" ],
	[ "'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid", 'UUID', "'ffffffff-ffff-ffff-ffff-ffffffffffff'" ],
	[ "'01234567-89ab-cdef-0123-456789abcdef'::uuid", 'Nullable(UUID)', "'01234567-89ab-cdef-0123-456789abcdef'" ],
	[ "NULL::uuid",                                    'Nullable(UUID)', 'NULL' ],

	# one-dimensional arrays
	[ "'{}'::int4[]",          'Array(Int32)',           '[]' ],
	[ "'{1,2,3}'::int4[]",     'Array(Int32)',           '[1,2,3]' ],
	[ "'[2:3]={7,8}'::int4[]", 'Array(Int32)',           '[7,8]' ],
	[ "'{1,NULL,3}'::int4[]",  'Array(Nullable(Int32))', '[1,NULL,3]' ],
	[ "'{NULL}'::text[]",      'Array(Nullable(String))', '[NULL]' ],
	[ "'{}'::text[]",          'Array(Nullable(String))', '[]' ],
	[ "ARRAY['a','','ü',NULL]", 'Array(Nullable(String))', "['a','','ü',NULL]" ],
	[ "ARRAY['x','y']::text[]", 'Array(LowCardinality(String))', "['x','y']" ],
	[ "'{1.5,-2.25}'::numeric[]", 'Array(Decimal(18, 2))', "[toDecimal64('1.5', 2), toDecimal64('-2.25', 2)]" ],
	[ "ARRAY['2026-09-02 00:00:00.5+00'::timestamptz, NULL]", "Array(Nullable(DateTime64(6, 'UTC')))",
		"[toDateTime64('2026-09-02 00:00:00.5', 6, 'UTC'), NULL]" ],
	[ "'{t,f}'::bool[]",       'Array(Bool)',            '[true,false]' ],
	[ "ARRAY['61f0c404-5cb3-11e7-907b-a6006ad3dba0'::uuid]", 'Array(UUID)',
		"[toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0')]" ],
	[ "ARRAY['1900-01-01'::date, '2299-12-31']", 'Array(Date32)',
		"[toDate32('1900-01-01'), toDate32('2299-12-31')]" ],
	[ "ARRAY['NaN'::float8, '-0']", 'Array(Float64)', '[nan, -0.]' ],
	[ "ARRAY[1::int2, NULL, -1]",  'Array(Nullable(Int64))', '[1, NULL, -1]' ],
	[ "ARRAY(SELECT generate_series(1, 200))", 'Array(Int32)', 'range(1, 201)' ],
	[ "ARRAY(SELECT repeat('v', g) FROM generate_series(0, 130) g)", 'Array(String)',
		"arrayMap(g -> repeat('v', g), range(0, 131))" ],
);

for my $c (@cases)
{
	my ($expr, $type, $lit) = @$c;
	my ($pg, $chx);
	eval {
		$pg = pg_hex($expr, $type);
		$chx = ch_hex($lit, $type);
		1;
	} or do {
		fail("$expr as $type: $@");
		next;
	};
	is($pg, $chx, "$expr as $type");
}

# The session's TimeZone and DateStyle change nothing.
is(pg_hex("'2026-09-02 00:00:00.5+00'::timestamptz", "DateTime64(6, 'UTC')",
		"SET TimeZone = 'America/New_York'; SET DateStyle = 'SQL, DMY';\n"),
	ch_hex("'2026-09-02 00:00:00.5'", "DateTime64(6, 'UTC')"),
	'timestamptz encoding ignores the session time zone');

# Known bytes, independent of the engine (docs/types.md).
is(pg_hex("'61f0c404-5cb3-11e7-907b-a6006ad3dba0'::uuid", 'UUID'),
	'E711B35C04C4F061A0DBD36A00A67B90', 'UUID byte order');
is(pg_hex("'1900-01-01'::date", 'Date32'), '219CFFFF', 'Date32 1900-01-01');
is(pg_hex("1.5::numeric", 'Decimal(18, 2)'), '9600000000000000', 'Decimal(18, 2) 1.5');
is(pg_hex("NULL::int4", 'Nullable(Int32)'), '01', 'Nullable NULL is 0x01 alone');
is(pg_hex("7::int4", 'Nullable(Int32)'), '0007000000', 'Nullable value is 0x00 + value');
is(pg_hex("repeat('x', 300)", 'String'), 'AC02' . ('78' x 300), 'LEB128 length');
is(pg_hex("7::int4", " Nullable ( Int64 ) "), '000700000000000000', 'type strings tolerate whitespace');
is(pg_hex("'2026-09-02'::timestamptz", "DateTime64(6, \\'UTC\\')"),
	pg_hex("'2026-09-02'::timestamptz", "DateTime64(6, 'UTC')"),
	"TabSeparated-escaped quotes in type strings are accepted");

# Fidelity errors: never rounded, clamped or truncated.
my @errors = (
	[ "123.456::numeric", 'Decimal(18, 2)', '22003',
		qr/value 123\.456 of column "value" does not fit Decimal\(18, 2\) exactly/ ],
	[ "0.001::numeric", 'Decimal(18, 2)', '22003', qr/non-zero digits beyond the scale/ ],
	[ "(-0.005)::numeric", 'Decimal(38, 2)', '22003', qr/does not fit Decimal\(38, 2\)/ ],
	[ "100000000000000000::numeric", 'Decimal(18, 2)', '22003', qr/too many integer digits/ ],
	[ "12345678901.5::numeric", 'Decimal(9, 2)', '22003', qr/does not fit Decimal\(9, 2\)/ ],
	[ "1e38::numeric", 'Decimal(38, 0)', '22003', qr/too many integer digits/ ],
	[ "1e76::numeric", 'Decimal(76, 0)', '22003', qr/too many integer digits/ ],
	[ "1.5::numeric", 'Decimal(1, 1)', '22003', qr/too many integer digits/ ],
	[ "'NaN'::numeric", 'Decimal(18, 2)', '22023', qr/value NaN of column "value" cannot be written as Decimal\(18, 2\)/ ],
	[ "'Infinity'::numeric", 'Decimal(18, 2)', '22003', qr/is infinite/ ],
	[ "'-Infinity'::numeric", 'Decimal(18, 2)', '22003', qr/is infinite/ ],
	[ "'2026-09-02 00:00:00.5+00'::timestamptz", "DateTime64(0, 'UTC')", '22008',
		qr/not representable in DateTime64\(0, 'UTC'\) exactly/ ],
	[ "'2026-09-02 00:00:00.0005+00'::timestamptz", "DateTime64(3, 'UTC')", '22008',
		qr/value 2026-09-02 00:00:00\.0005\+00 of column "value" is not representable/ ],
	[ "'1969-12-31 23:59:59.9999+00'::timestamptz", "DateTime64(3, 'UTC')", '22008',
		qr/not representable/ ],
	[ "'infinity'::timestamptz", "DateTime64(6, 'UTC')", '22008', qr/is infinite/ ],
	[ "'-infinity'::timestamptz", "DateTime64(6, 'UTC')", '22008', qr/is infinite/ ],
	[ "'1899-12-31 23:59:59.999999+00'::timestamptz", "DateTime64(6, 'UTC')", '22008',
		qr/outside the range/ ],
	[ "'2300-01-01 00:00:00+00'::timestamptz", "DateTime64(6, 'UTC')", '22008', qr/outside the range/ ],
	[ "'infinity'::timestamp", "DateTime64(6, 'UTC')", '22008', qr/is infinite/ ],
	[ "'1899-12-31'::date", 'Date32', '22008', qr/outside the range of Date32/ ],
	[ "'2300-01-01'::date", 'Date32', '22008', qr/outside the range of Date32/ ],
	[ "'infinity'::date", 'Date32', '22008', qr/infinite/ ],
	[ "'-infinity'::date", 'Date32', '22008', qr/infinite/ ],
	[ "'1969-12-31'::date", 'Date', '22008', qr/outside the range of Date / ],
	[ "'2149-06-07'::date", 'Date', '22008', qr/outside the range of Date / ],
	[ "'{{1,2},{3,4}}'::int4[]", 'Array(Int32)', '22023', qr/2-dimensional array/ ],
	[ "'{1,NULL}'::int4[]", 'Array(Int32)', '22004', qr/NULL element/ ],
	[ "NULL::int4", 'Int32', '22004', qr/column "value" is NULL but ClickHouse type Int32 is not Nullable/ ],
	[ "NULL::text", 'LowCardinality(String)', '22004', qr/column "value" is NULL but ClickHouse type String is not Nullable/ ],
	[ "NULL::int4[]", 'Array(Nullable(Int32))', '22004',
		qr/column "value" is NULL but ClickHouse type Array\(Nullable\(Int32\)\) is not Nullable/ ],

	# parity: refused before any value is encoded
	[ "1::int4", 'Int16', '42804', qr/cannot be written as ClickHouse type Int16/ ],
	[ "1::int8", 'Int32', '42804', qr/column "value" of type bigint cannot be written as ClickHouse type Int32/ ],
	[ "1::int4", 'UInt32', '42804', qr/cannot be written/ ],
	[ "'1'::float8", 'Float32', '42804', qr/cannot be written/ ],
	[ "now()", 'DateTime64(6)', '42804', qr/cannot be written/ ],
	[ "now()", "DateTime64(6, 'Europe/Berlin')", '42804', qr/cannot be written/ ],
	[ "now()", "DateTime64(9, 'UTC')", '42804', qr/cannot be written/ ],
	[ "now()", "DateTime('UTC')", '42804', qr/cannot be written/ ],
	[ "'x'::text", 'FixedString(1)', '42804', qr/cannot be written/ ],
	[ "1::int4", 'Array(Int32)', '42804', qr/cannot be written/ ],
	[ "'{1}'::int4[]", 'Int32', '42804', qr/cannot be written/ ],
	[ "'{1}'::int4[]", 'Array(Array(Int32))', '42804', qr/cannot be written/ ],
	[ "'1 day'::interval", 'Int64', '42804', qr/of type interval cannot be written/ ],
	[ "1::int4", 'Decimal(77, 2)', '42804', qr/cannot be written/ ],
	[ "1::int4", 'Nullable(Nullable(Int32))', '42804', qr/cannot be written/ ],
	[ "1::int4", 'Int32)', '42804', qr/cannot be written/ ],
);

for my $e (@errors)
{
	my ($expr, $type, $state, $re) = @$e;
	my $err = psql_err("SELECT dpwin_test.encode_rowbinary($expr, " . pg_literal($type) . ")");
	ok(defined $err && $err =~ /^$state: / && $err =~ $re,
		"$expr as $type fails with $state")
	  or diag("got: " . ($err // 'no error'));
}

# A fidelity error names the row by its window value, in UTC.
{
	my ($rc, $out, $err) = psql("SET TimeZone = 'Asia/Tokyo';\n"
		  . "SELECT dpwin_test.encode_rowbinary(123.456::numeric, 'Decimal(18, 2)', "
		  . "'2026-09-02 00:00:00.5+00'::timestamptz)");
	like($err, qr/value 123\.456 of column "value" does not fit Decimal\(18, 2\) exactly/,
		'fidelity error message');
	like($err, qr/DETAIL:\s+Row with window value 2026-09-02 00:00:00\.5\+00\./,
		'fidelity error detail names the window value in UTC');
}

# A NULL for a type that is not Nullable names the row by its window value.
{
	my ($rc, $out, $err) = psql("SELECT dpwin_test.encode_rowbinary(NULL::bigint, 'Int64', "
		  . "'2026-09-02 00:00:00.25+00'::timestamptz)");
	like($err, qr/ERROR:\s+column "value" is NULL but ClickHouse type Int64 is not Nullable/,
		'NULL error message names the column');
	like($err, qr/DETAIL:\s+Row with window value 2026-09-02 00:00:00\.25\+00\./,
		'NULL error detail names the window value');
	like($err, qr/HINT:\s+Declare the ClickHouse column Nullable\(Int64\)/, 'NULL error hint');
}

# Parity rules as the coordinator sees them: nullability is not part of
# them (a NULL is refused per value, as above).
sub parity
{
	my ($type, $typmod, $ch) = @_;
	return psql_ok("SELECT coalesce(dpwin_test.rb_type_parity("
		  . pg_literal($type) . ", $typmod, " . pg_literal($ch) . "), 'ok')");
}
is(parity('integer', -1, 'Int32'), 'ok', 'int4 -> Int32');
is(parity('integer', -1, 'Nullable(Int32)'), 'ok', 'int4 -> Nullable(Int32)');
is(parity('integer', -1, 'Nullable(Int64)'), 'ok', 'int4 -> Nullable(Int64)');
is(parity('text', -1, 'LowCardinality(String)'), 'ok', 'text -> LowCardinality(String)');
is(parity('integer[]', -1, 'Array(Int32)'), 'ok', 'int4[] -> Array(Int32)');
is(parity('integer[]', -1, 'Array(Nullable(Int32))'), 'ok', 'int4[] -> Array(Nullable(Int32))');
like(parity('integer', -1, 'Int16'), qr/narrowing is refused/, 'int4 -> Int16 refused');
is(parity('text', -1, 'LowCardinality(Nullable(String))'), 'ok', 'text -> LowCardinality(Nullable(String))');
is(parity('timestamptz', -1, "Nullable(DateTime64(6, 'UTC'))"), 'ok', 'timestamptz -> Nullable(DateTime64(6, UTC))');
is(parity('numeric', -1, 'Decimal(18, 2)'), 'ok', 'numeric -> Decimal(18, 2)');
like(parity('numeric', -1, 'Decimal(18, 2'), qr/cannot parse/, 'unparsable type');
# A refused pair names the type dpwin expects for the PostgreSQL column
# (the admission's error detail).
like(parity('numeric', 786439, 'String'), qr/\(expected Decimal\(12, 3\)\)$/, 'numeric(12,3) -> String: expected Decimal(12, 3)');
like(parity('numeric', -1, 'String'), qr/\(expected Decimal\(38, 10\)\)$/, 'numeric -> String: expected Decimal(38, 10)');
like(parity('timestamptz', 3, 'String'), qr/\(expected DateTime64\(3, 'UTC'\)\)$/, "timestamptz(3) -> String: expected DateTime64(3, 'UTC')");
like(parity('timestamp', -1, 'Int64'), qr/\(expected DateTime64\(6, 'UTC'\)\)$/, "timestamp -> Int64: expected DateTime64(6, 'UTC')");
like(parity('int4[]', -1, 'Array(String)'), qr/\(expected Int32\)$/, 'int4[] -> Array(String): expected element Int32');
like(parity('int8', -1, 'Nullable(String)'), qr/\(expected Int64\)$/, 'int8 -> Nullable(String): expected Int64');

# Table columns keep their typmod: char(n) padding and numeric(p,s).
{
	my $t = unique_name('rb_parity');
	my $out = psql_ok("CREATE TEMP TABLE $t (c char(4), n numeric(10,3));\n"
		  . "INSERT INTO $t VALUES ('ab', 1.2);\n"
		  . "SELECT upper(encode(dpwin_test.encode_rowbinary(c, 'String'), 'hex')) || ',' "
		  . "|| upper(encode(dpwin_test.encode_rowbinary(n, 'Decimal(18, 2)'), 'hex')) FROM $t");
	is($out, ch_hex("'ab  '", 'String') . ',' . ch_hex("'1.2'", 'Decimal(18, 2)'),
		'char(4) is written padded; numeric(10,3) to Decimal(18, 2)');
}

# Values read from a table: short (1-byte) varlena headers and compressed
# (toasted) values go through the same encoders.
{
	my $t = unique_name('rb_toast');
	my $out = psql_ok("CREATE TEMP TABLE $t (t text, n numeric, a numeric[], j jsonb) WITH (toast_tuple_target = 128);\n"
		  . "INSERT INTO $t VALUES (repeat('z', 100000), -12.5, '{1.25,NULL,-3}', "
		  . "(SELECT jsonb_object_agg('k' || g, g) FROM generate_series(1, 3000) g));\n"
		  . "SELECT md5(dpwin_test.encode_rowbinary(t, 'String')) || ',' "
		  . "|| upper(encode(dpwin_test.encode_rowbinary(n, 'Decimal(18, 2)'), 'hex')) || ',' "
		  . "|| upper(encode(dpwin_test.encode_rowbinary(a, 'Array(Nullable(Decimal(18, 2)))'), 'hex')) || ',' "
		  . "|| md5(dpwin_test.encode_rowbinary(j, 'String')) || ',' "
		  . "|| md5(dpwin_test.encode_rowbinary(j::text, 'String')) FROM $t");
	my ($tmd5, $nhex, $ahex, $jmd5, $jtmd5) = split /,/, $out;
	is($tmd5, trim(ch_ok("SELECT lower(hex(MD5(formatRow('RowBinary', repeat('z', 100000)))))")),
		'compressed text from a table');
	is($nhex, ch_hex("'-12.5'", 'Decimal(18, 2)'), 'numeric from a table');
	is($ahex, ch_hex("[toDecimal64('1.25', 2), NULL, toDecimal64('-3', 2)]", 'Array(Nullable(Decimal(18, 2)))'),
		'numeric[] from a table');
	is($jmd5, $jtmd5, 'toasted jsonb is written as its canonical text');
}

# SipHash-2-4: a reference vector, then many against sipHash64Keyed.
sub u64_to_s64
{
	my ($u) = @_;
	my $b = Math::BigInt->new($u);
	$b -= Math::BigInt->new(2)**64 if $b >= Math::BigInt->new(2)**63;
	return $b->bstr;
}

sub s64_to_u64
{
	my ($s) = @_;
	my $b = Math::BigInt->new($s);
	$b += Math::BigInt->new(2)**64 if $b < 0;
	return $b->bstr;
}

is(s64_to_u64(psql_ok("SELECT dpwin_test.siphash24("
		  . u64_to_s64(Math::BigInt->from_hex('0706050403020100')) . ", "
		  . u64_to_s64(Math::BigInt->from_hex('0f0e0d0c0b0a0908'))
		  . ", '\\x000102030405060708090a0b0c0d0e'::bytea)")),
	Math::BigInt->from_hex('a129ca6149be45e5')->bstr,
	'SipHash-2-4 reference vector (15 bytes)');

srand(20260902);
my (@pgq, @chq);
for my $i (0 .. 63)
{
	my $len = $i < 48 ? $i : int(rand(200));
	my $hex = join '', map { sprintf '%02x', ($i % 7 == 0 ? 10 : int(rand(256))) } 1 .. $len;
	my $k0 = Math::BigInt->from_hex(join '', map { sprintf '%02x', int(rand(256)) } 1 .. 8)->bstr;
	my $k1 = $i % 5 == 0 ? '0' : Math::BigInt->from_hex(join '', map { sprintf '%02x', int(rand(256)) } 1 .. 8)->bstr;
	push @pgq, "($i, dpwin_test.siphash24(" . u64_to_s64($k0) . ", " . u64_to_s64($k1) . ", '\\x$hex'::bytea))";
	push @chq, "SELECT $i AS i, sipHash64Keyed((toUInt64($k0), toUInt64($k1)), unhex('$hex')) AS h";
}
my @pgh = map { s64_to_u64((split /\|/)[1]) }
  split /\n/, psql_ok("SELECT * FROM (VALUES " . join(', ', @pgq) . ") v(i, h) ORDER BY i");
my @chh = split /\n/, trim(ch_ok("SELECT h FROM (" . join(' UNION ALL ', @chq) . ") ORDER BY i"));
is(scalar(@pgh), 64, '64 SipHash values from PostgreSQL');
is_deeply(\@pgh, \@chh, 'SipHash-2-4 equals ClickHouse sipHash64Keyed on 64 inputs');

# SipHash-2-4-128, the digest's function: the reference vector of the
# empty message, then the same 64 inputs against sipHash128ReferenceKeyed,
# all 16 bytes of each.
is(psql_ok("SELECT encode(dpwin_test.siphash24_128("
		  . u64_to_s64(Math::BigInt->from_hex('0706050403020100')) . ", "
		  . u64_to_s64(Math::BigInt->from_hex('0f0e0d0c0b0a0908'))
		  . ", ''::bytea), 'hex')"),
	'a3817f04ba25a8e66df67214c7550293',
	'SipHash-2-4-128 reference vector (empty message)');
{
	my @pg128q = map { s/dpwin_test\.siphash24\(/encode(dpwin_test.siphash24_128(/r =~ s/::bytea\)\)$/::bytea), 'hex'))/r } @pgq;
	my @ch128q = map { s/sipHash64Keyed\((.*)\) AS h$/lower(hex(sipHash128ReferenceKeyed($1))) AS h/r } @chq;
	my @pg128 = map { (split /\|/)[1] }
	  split /\n/, psql_ok("SELECT * FROM (VALUES " . join(', ', @pg128q) . ") v(i, h) ORDER BY i");
	my @ch128 = split /\n/, trim(ch_ok("SELECT h FROM (" . join(' UNION ALL ', @ch128q) . ") ORDER BY i"));
	is(scalar(@pg128), 64, '64 SipHash-128 values from PostgreSQL');
	like($pg128[1] // '', qr/^[0-9a-f]{32}$/, 'a SipHash-128 value is 16 bytes');
	is_deeply(\@pg128, \@ch128, 'SipHash-2-4-128 equals ClickHouse sipHash128ReferenceKeyed on 64 inputs');
}

# The row digest: PostgreSQL over its encoded rows, ClickHouse over
# formatRow('RowBinary', ...) of the same rows, with the select list that
# target.c sends, in both schemes: a new key's, and the four-number key of
# an invocation journaled by dpwin 0.1.  Rows end in byte 0x0A on purpose.
for my $key ('sip128:18446744073709551615:9223372036854775808',
	'1:2:18446744073709551615:9223372036854775808')
{
	my $scheme = $key =~ /^sip128:/ ? 'SipHash-128' : 'two SipHash-64';
	my @rows = (
		[ "1::int8", "'2026-09-02 00:00:00.5+00'::timestamptz", "10.25::numeric", "E'line\\n'::text", "2560::int2" ],
		[ "(-1)::int8", "'1969-12-31 23:59:59.999999+00'::timestamptz", "(-0.01)::numeric", "NULL::text", "10::int2" ],
		[ "1::int8", "'2026-09-02 00:00:00.5+00'::timestamptz", "10.25::numeric", "E'line\\n'::text", "2560::int2" ],
	);
	my @chrows = (
		"SELECT toInt64(1) AS a, toDateTime64('2026-09-02 00:00:00.5', 6, 'UTC') AS b, toDecimal64('10.25', 2) AS c, CAST('line\\n' AS Nullable(String)) AS d, toInt16(2560) AS e",
		"SELECT toInt64(-1), toDateTime64('1969-12-31 23:59:59.999999', 6, 'UTC'), toDecimal64('-0.01', 2), CAST(NULL AS Nullable(String)), toInt16(10)",
		"SELECT toInt64(1), toDateTime64('2026-09-02 00:00:00.5', 6, 'UTC'), toDecimal64('10.25', 2), CAST('line\\n' AS Nullable(String)), toInt16(2560)",
	);
	my @types = ('Int64', "DateTime64(6, 'UTC')", 'Decimal(18, 2)', 'Nullable(String)', 'Int16');
	my @rowexprs;
	for my $r (@rows)
	{
		push @rowexprs, join(' || ',
			map { "dpwin_test.encode_rowbinary($r->[$_], " . pg_literal($types[$_]) . ")" } 0 .. $#types);
	}
	my $pgdigest = psql_ok("SELECT dpwin_test.digest_rows(" . pg_literal($key) . ", ARRAY[" . join(', ', @rowexprs) . "])");
	my $select = psql_ok("SELECT dpwin_test.digest_ch_select_list(" . pg_literal($key) . ", '`a`, `b`, `c`, `d`, `e`')");
	like($select, qr/formatRow\('RowBinary', `a`, `b`, `c`, `d`, `e`\)/, "$scheme: select list uses formatRow RowBinary");
	unlike($select, qr/NoNewline/, "$scheme: select list does not use formatRowNoNewline");
	like($select, $key =~ /^sip128:/ ? qr/^count\(\), sum\(reinterpretAsUInt64\(sipHash128ReferenceKeyed\(/
		: qr/^count\(\), sum\(sipHash64Keyed\(/, "$scheme: the key names the function");
	my $chdigest = trim(ch_ok("SELECT $select FROM (" . join(' UNION ALL ', @chrows) . ")"));
	$chdigest =~ s/\t/:/g;
	like($pgdigest, qr/^3:\d+:\d+$/, "$scheme: PostgreSQL digest has count 3");
	is($pgdigest, $chdigest, "$scheme: multiset digest equals ClickHouse digest");
}

done_testing();
