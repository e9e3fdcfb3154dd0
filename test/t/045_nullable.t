# Source columns that may hold NULLs into ClickHouse columns that are not
# Nullable (docs/types.md, "NULLs"), end to end against real PostgreSQL and
# the real ClickHouse engine.
#
# The source is made with CREATE TABLE ... AS, so that no column is NOT
# NULL, and the target has plain Int64, DateTime64(6, 'UTC'),
# Decimal(18, 2), String, LowCardinality(String) and Array(Int32) columns:
#
#   - dpwin.create_route names the columns that may hold NULLs in a NOTICE
#     (the window column aside), and none for a source without them;
#   - admission accepts the target and a refresh publishes the window
#     exactly (multisets of rows compared on both sides), also with a NULL
#     window value in the source, which is never in a window;
#   - a NULL in the window fails the refresh with 22004, naming the column
#     and, in the detail, the row's window value: in the first row of the
#     window, in the last row of a chunk, in a duplicated row, in a chunk
#     other than the first, as a NULL array and as a NULL array element.
#     Each time the target keeps its rows and UUID, no EXCHANGE is sent,
#     no staging or generation table is left, the invocation is journaled
#     failed with 22004, and the failing chunk is journaled failed at its
#     first attempt (a NULL is not retried);
#   - once the NULLs are gone the same route publishes again.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes psql_ok_long sorted_lines multiset_is
  uuid_of own_tables dpwin_tables_left exchanges);

my $tag = "t045_$$";
my $db = $tag;
my $schema = $tag;
my $route = "${tag}_r";
my $src = "$schema.src";
my $tgt = "`$db`.`tgt`";

# The window [09-08, 09-09): four chunks of six hours.
my $E = '2026-09-09 00:00:00+00';
my $lo = '2026-09-08 00:00:00+00';
my $pg_in = "w >= '$lo' AND w < '$E'";
my $ch_in = "w >= toDateTime64('2026-09-08 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-09-09 00:00:00', 6, 'UTC')";

# One row as text both sides render alike: id, w in Unix microseconds,
# amount without trailing zeros, note and lc as UTF-8 hex, tags joined.
my $pg_row = "id::text || '|' || (extract(epoch FROM w) * 1000000)::bigint::text || '|' || trim_scale(amount)::text"
  . " || '|' || encode(convert_to(note, 'UTF8'), 'hex') || '|' || encode(convert_to(lc, 'UTF8'), 'hex')"
  . " || '|' || array_to_string(tags, ',')";
my $ch_row = "toString(id) || '|' || toString(toUnixTimestamp64Micro(w)) || '|' || toString(amount)"
  . " || '|' || lower(hex(note)) || '|' || lower(hex(lc))"
  . " || '|' || arrayStringConcat(arrayMap(x -> toString(x), tags), ',')";

sub src_window { return sorted_lines(psql_ok_long("SELECT $pg_row FROM $src WHERE $pg_in")); }
sub tgt_rows { return sorted_lines(ch_ok("SELECT $ch_row FROM $tgt")); }
sub tgt_window { return sorted_lines(ch_ok("SELECT $ch_row FROM $tgt WHERE $ch_in")); }

# The source's rows, from 09-07 to 09-10, in window order, so that the
# physical order (the order a chunk reads them in) is the window order:
# a row every 37 minutes, plus rows on the first and the last microsecond
# of every chunk of the window, plus a row whose window value is NULL.
# $override is a map from id to an SQL expression replacing that row's
# columns (a column list in the SELECT's order); $dup lists ids inserted
# twice.
my $rows_sql = <<'SQL';
SELECT g::bigint AS id, timestamptz '2026-09-07 00:00:00+00' + g * interval '37 minutes' AS w,
	(g * 1.25)::numeric(18,2) AS amount, 'note ' || g || ' ü' AS note,
	(ARRAY['red', 'green', 'blue'])[g % 3 + 1] AS lc, ARRAY[g, -g, 0] AS tags
  FROM generate_series(0, 116) g
UNION ALL
SELECT 1000 + k, timestamptz '2026-09-08 00:00:00+00' + k * interval '6 hours',
	k + 0.5, 'chunk start ' || k, 'start', ARRAY[k]
  FROM generate_series(0, 3) k
UNION ALL
SELECT 2000 + k, timestamptz '2026-09-08 06:00:00+00' + k * interval '6 hours' - interval '1 microsecond',
	-k - 0.25, 'chunk end ' || k, 'end', '{}'::int[]
  FROM generate_series(0, 3) k
UNION ALL
SELECT 3000, NULL, 1, 'no window', 'none', ARRAY[1]
SQL

sub fill_source
{
	my (%opt) = @_;
	my $ov = $opt{override} // {};
	my $dup = join(', ', @{ $opt{dup} // [] }) || 'NULL';
	my @cols;
	for my $col (qw(id w amount note lc tags))
	{
		my @when = map { defined $ov->{$_}{$col} ? "WHEN $_ THEN $ov->{$_}{$col}" : () } sort keys %$ov;
		push @cols, @when ? "CASE r.id @when ELSE r.$col END" : "r.$col";
	}
	psql_ok_long("TRUNCATE $src;
		INSERT INTO $src
		SELECT " . join(', ', @cols) . " FROM (
			SELECT * FROM ($rows_sql) s
			UNION ALL SELECT * FROM ($rows_sql) s WHERE id IN ($dup)) r
		ORDER BY r.w NULLS LAST, r.id");
}

# dpwin_refresh expected to fail: (SQLSTATE, message, detail).
sub refresh_fails
{
	my ($inv) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\nSELECT * FROM dpwin_refresh('$route', '$E', '$inv')");
	return ('no error', '', '') unless $rc;
	my ($state, $msg) = $err =~ /ERROR:\s+([0-9A-Z]{5}):\s+(.*)/;
	my ($detail) = $err =~ /DETAIL:\s+(.*)/;
	return ($state // $err, $msg // '', $detail // '');
}

sub refresh_ok
{
	my $out = psql_ok_long("SELECT state, source_rows FROM dpwin_refresh('$route', '$E')");
	return split /\|/, $out;
}

# ---- setup -------------------------------------------------------------------

fresh_fixture($db, $schema);
psql_ok_long("CREATE TABLE $src AS SELECT * FROM ($rows_sql) s ORDER BY w NULLS LAST, id");
is(psql_ok("SELECT count(*) FILTER (WHERE attnotnull) || '/' || count(*) FROM pg_attribute"
	  . " WHERE attrelid = '$src'::regclass AND attnum > 0"), '0/6',
	'CREATE TABLE ... AS made a source without any NOT NULL column');
is(psql_ok("SELECT count(*) FROM $src WHERE w IS NULL"), 1, 'the source has a row with a NULL window value');
ch_ok("CREATE TABLE $tgt (id Int64, w DateTime64(6, 'UTC'), amount Decimal(18, 2), note String,"
	  . " lc LowCardinality(String), tags Array(Int32)) ENGINE = MergeTree ORDER BY id");

# The NOTICE of create_route names every column that may hold NULLs but
# the window column.
{
	my ($rc, $out, $err) = psql("SELECT dpwin.create_route('$route', '$src', 'w', 'sandbox_ch', '$db', 'tgt',"
		  . " interval '1 day', interval '6 hours', parallelism => 2, batch_rows => 4)");
	is($rc, 0, 'create_route accepts the source') or diag($err);
	like($err, qr/NOTICE:\s+columns "id", "amount", "note", "lc", "tags" of route "\Q$route\E" may hold NULLs\n/,
		'create_route names the columns that may hold NULLs, the window column aside');
	like($err, qr/DETAIL:\s+Where the ClickHouse column is not Nullable .* fails the refresh with SQLSTATE 22004/,
		'... and says that a NULL there fails the refresh');

	psql_ok("CREATE TABLE $schema.strict (id bigint NOT NULL, w timestamptz, v text NOT NULL)");
	($rc, $out, $err) = psql("SELECT dpwin.create_route('${route}_strict', '$schema.strict', 'w', 'sandbox_ch', '$db', 'strict',"
		  . " interval '1 day', interval '6 hours')");
	is($rc, 0, 'create_route accepts a source whose other columns are NOT NULL') or diag($err);
	unlike($err, qr/NOTICE/, '... without a NOTICE');
}

# ---- a clean window is published ---------------------------------------------

# Rows before and after the window first, then the window itself.
for my $end ('2026-09-08 00:00:00+00', '2026-09-10 00:00:00+00')
{
	my ($state) = split /\|/, psql_ok_long("SELECT state FROM dpwin_refresh('$route', '$end')");
	is($state, 'completed', "refresh up to $end completed");
}
{
	my ($state, $n) = refresh_ok();
	is($state, 'completed', 'a CREATE TABLE ... AS source refreshes into non-Nullable columns');
	my $exp = src_window();
	is($n, scalar(@$exp), "... $n rows in the window");
	multiset_is(tgt_window(), $exp, '... and the target window equals the source window');
}

my $before = tgt_rows();
my $uuid_before = uuid_of('tgt');
cmp_ok(scalar(@$before), '>', 100, 'the target holds ' . scalar(@$before) . ' rows inside and outside the window');

# ---- a NULL in the window fails the refresh ----------------------------------

# label, rows to override (id => {column => expression}), ids inserted
# twice, the column named, the row's window value, its chunk, the message.
my @cases = (
	[ 'the first row of the window', { 1000 => { id => 'NULL' } }, [],
		'id', '2026-09-08 00:00:00+00', 0, qr/column "id" is NULL but ClickHouse type Int64 is not Nullable/ ],
	[ 'the last row of a chunk', { 2000 => { amount => 'NULL' } }, [],
		'amount', '2026-09-08 05:59:59.999999+00', 0,
		qr/column "amount" is NULL but ClickHouse type Decimal\(18, 2\) is not Nullable/ ],
	[ 'a duplicated row', { 45 => { note => 'NULL' } }, [45],
		'note', '2026-09-08 03:45:00+00', 0, qr/column "note" is NULL but ClickHouse type String is not Nullable/ ],
	[ 'outside the window', { 108 => { lc => 'NULL' } }, [],
		'lc', '2026-09-09 18:36:00+00', undef, undef ],
	[ 'a chunk other than the first', { 72 => { lc => 'NULL' } }, [],
		'lc', '2026-09-08 20:24:00+00', 3, qr/column "lc" is NULL but ClickHouse type String is not Nullable/ ],
	[ 'an array column that is not NOT NULL', { 2001 => { tags => 'NULL' } }, [],
		'tags', '2026-09-08 11:59:59.999999+00', 1,
		qr/column "tags" is NULL but ClickHouse type Array\(Int32\) is not Nullable/ ],
	[ 'an array element', { 52 => { tags => "ARRAY[1, NULL]" } }, [],
		'tags', '2026-09-08 08:04:00+00', 1,
		qr/array column "tags" holds a NULL element but ClickHouse type Array\(Int32\) has no Nullable elements/ ],
);

for my $c (@cases)
{
	my ($label, $override, $dup, $col, $wv, $chunk, $msg_re) = @$c;
	fill_source(override => $override, dup => $dup);
	my ($id) = keys %$override;
	my $null_cond = $override->{$id}{$col} eq 'NULL' ? "$col IS NULL" : "array_position($col, NULL) IS NOT NULL";

	# a NULL outside the window is never read: the case after 09-09 only
	# checks that
	unless (defined $chunk)
	{
		is(psql_ok("SELECT count(*) FROM $src WHERE $null_cond AND NOT ($pg_in)"), 1,
			"$label: the source has a NULL");
		my ($state) = refresh_ok();
		is($state, 'completed', "$label: the refresh completes");
		multiset_is(tgt_rows(), $before, "$label: the target has the same rows");
		$uuid_before = uuid_of('tgt');
		next;
	}

	# Where the NULL is, checked independently of dpwin: its window value,
	# its chunk, its multiplicity, and its place in the physical order the
	# chunk's scan reads.
	is(psql_ok("SET TimeZone = 'UTC'; SELECT string_agg(w::text, ',') FROM $src WHERE $null_cond"),
		join(',', ($wv) x (@$dup ? 2 : 1)), "$label: the source has the NULL at $wv");
	is(psql_ok("SELECT chunk_no FROM dpwin.plan('$route', '$E') WHERE lo <= '$wv' AND '$wv' < hi"),
		$chunk, "$label: ... in chunk $chunk");
	if ($label =~ /first row/)
	{
		is(psql_ok("SELECT $null_cond FROM $src WHERE $pg_in ORDER BY ctid LIMIT 1"), 't',
			"$label: ... stored first in the window");
	}
	if ($label =~ /last row/)
	{
		is(psql_ok("SELECT $null_cond FROM $src s JOIN dpwin.plan('$route', '$E') p ON p.chunk_no = $chunk"
			  . " WHERE s.w >= p.lo AND s.w < p.hi ORDER BY s.ctid DESC LIMIT 1"), 't',
			"$label: ... stored last in its chunk");
	}

	my $inv = psql_ok('SELECT gen_random_uuid()');
	my $seq = ch_log_seq();
	my ($state, $msg, $detail) = refresh_fails($inv);
	is($state, '22004', "$label: the refresh fails with 22004") or diag("$state: $msg");
	like($msg, $msg_re, "$label: the message names the column");
	is($detail, "Row with window value $wv.", "$label: the detail names the row's window value");

	multiset_is(tgt_rows(), $before, "$label: the target keeps exactly its rows");
	is(uuid_of('tgt'), $uuid_before, "$label: the target is the same table");
	is(scalar(exchanges($seq, 'tgt')), 0, "$label: no EXCHANGE was sent");
	is_deeply(own_tables($route, $inv), [], "$label: no staging or generation table is left");
	is(dpwin_tables_left(), 0, "$label: no dpwin table but backups in the database");
	is(psql_ok("SELECT state || ' ' || error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"),
		'failed 22004', "$label: the invocation is journaled failed with 22004");
	like(psql_ok("SELECT error FROM dpwin.invocations WHERE invocation_id = '$inv'"), $msg_re,
		"$label: ... with the message");
	is(psql_ok("SELECT count(*) FROM dpwin.publication WHERE invocation_id = '$inv'"), 0,
		"$label: no publication intent");
	my $journal = psql_ok("SELECT state || ' ' || attempt || ' ' || error FROM dpwin.chunks"
		  . " WHERE invocation_id = '$inv' AND chunk_no = $chunk");
	like($journal, qr/^failed 0 /, "$label: chunk $chunk is journaled failed at its first attempt, not retried")
	  or diag($journal);
	like($journal, $msg_re, "$label: ... with the message");
}

# ---- without the NULLs the route publishes again -------------------------

fill_source();
{
	my ($state, $n) = refresh_ok();
	is($state, 'completed', 'without NULLs in the window the refresh completes again');
	multiset_is(tgt_window(), src_window(), '... and publishes the source window');
}

drop_routes($route, "${route}_strict");
drop_fixture();

done_testing();
