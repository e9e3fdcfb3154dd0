# Fidelity errors and request size bounds during extraction, against the
# real engine.
#
# * A value ClickHouse cannot hold exactly (a numeric with more decimals
#   than the Decimal scale, a timestamp with microseconds into
#   DateTime64(3)) stops the invocation before anything is published: the
#   SQLSTATE of docs/types.md, a message naming the column and the value,
#   a detail naming the row's window value, the target untouched, no
#   staging table left.
# * max_encoded_bytes = 65536 with rows of about 1 kB: each chunk is sent as
#   several INSERTs (counted in the endpoint's query log), none larger than
#   the bound, and the data is exact.  Every row's RowBinary starts with a
#   byte the INSERT data-start rule could swallow (0x09, 0x0A, 0x0C, 0x0D,
#   0x20), so every request body starts with one.
# * A single row larger than the bound fails with 54000, naming the row.
# * Empty chunks and an empty window, with quoted names and the route's
#   columns in another order than the table's.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture sorted_lines multiset_is uuid_of dpwin_tables_left);
use POSIX qw(ceil);

my $tag = "t053_$$";
my $db = $tag;
my $schema = $tag;
my $srv = 'sandbox_ch';

my $lo = '2026-07-01 00:00:00+00';
my $hi = '2026-07-02 00:00:00+00';
my $ch_in = "w >= toDateTime64('2026-07-01 00:00:00', 6, 'UTC') AND w < toDateTime64('2026-07-02 00:00:00', 6, 'UTC')";

# The target's UUID and rows.
sub target_state
{
	my ($tbl, $ch_row) = @_;
	return (uuid_of($tbl), sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl`")));
}

# psql's whole error output for a failing statement
sub refresh_error
{
	my ($route) = @_;
	my ($rc, $out, $err) = psql("\\set VERBOSITY verbose\nSELECT state FROM dpwin_refresh('$route', '$hi')");
	return $rc ? $err : "succeeded: $out";
}

fresh_fixture($db, $schema);

# ---- fidelity errors ------------------------------------------------------

{
	my $src = "$schema.fid";
	my $route = "${tag}_fid";
	my $ch_row = "toString(id) || '|' || toString(amount) || '|' || toString(toUnixTimestamp64Micro(ts))";
	ch_ok("CREATE TABLE `$db`.`fid` (id Int64, w DateTime64(6, 'UTC'), amount Decimal(18, 2),"
		  . " ts DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY id");
	psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz NOT NULL, amount numeric(24,4) NOT NULL,
			ts timestamptz NOT NULL);
		INSERT INTO $src SELECT g, timestamptz '$lo' - interval '2 hours' + g * interval '10 seconds',
			g * 1.5, timestamptz '2026-01-01 00:00:00+00' + g * interval '1.001 seconds'
		  FROM generate_series(0, 9359) g;");
	psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', 'fid',
		interval '1 day', interval '3 hours', parallelism => 2)");
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi')"), 'completed',
		'values that fit: the refresh completes');
	my ($uuid, $rows) = target_state('fid', $ch_row);
	cmp_ok(scalar(@$rows), '>', 8000, 'the target holds ' . scalar(@$rows) . ' rows');

	my @cases = (
		[ 'a numeric with more decimals than the Decimal scale',
			"amount = 123.456, w = '2026-07-01 19:30:00.25+00'",
			'22003', qr/value 123\.456\d* of column "amount" does not fit Decimal\(18, ?2\)/,
			qr/2026-07-01[ T]19:30:00\.25/ ],
		[ 'a numeric with more integer digits than the Decimal precision',
			"amount = 10000000000000000, w = '2026-07-01 20:00:00+00'",
			'22003', qr/value 10000000000000000(\.0+)? of column "amount"/,
			qr/2026-07-01[ T]20:00:00/ ],
		[ 'a timestamp with microseconds into DateTime64(3)',
			"ts = '2026-01-01 12:00:00.0005+00', w = '2026-07-01 21:15:00+00'",
			'22008', qr/value 2026-01-01[ T]12:00:00\.0005\S* of column "ts"/,
			qr/2026-07-01[ T]21:15:00/ ],
	);
	for my $c (@cases)
	{
		my ($label, $set, $state, $msg_re, $win_re) = @$c;
		psql_ok("UPDATE $src SET $set WHERE id = 7000");
		my $err = refresh_error($route);
		like($err, qr/ERROR:\s+$state: /, "$label: SQLSTATE $state");
		like($err, $msg_re, "$label: the message names the column and the value");
		like($err, qr/DETAIL:\s+Row with window value $win_re/, "$label: the detail names the row's window value");
		my $inv = psql_ok("SELECT invocation_id FROM dpwin.invocations WHERE route_name = '$route' ORDER BY created_at DESC LIMIT 1");
		is(psql_ok("SELECT state, error_sqlstate FROM dpwin.invocations WHERE invocation_id = '$inv'"), "failed|$state",
			"$label: the invocation failed with $state");
		is(psql_ok("SELECT count(*) FROM dpwin.publication WHERE invocation_id = '$inv'"), 0,
			"$label: no publication was intended");
		my ($uuid_after, $rows_after) = target_state('fid', $ch_row);
		is($uuid_after, $uuid, "$label: the target is the same table");
		multiset_is($rows_after, $rows, "$label: the target rows are untouched");
		is(dpwin_tables_left(), 0, "$label: no staging or generation table left");
		psql_ok("UPDATE $src SET amount = id * 1.5, w = timestamptz '$lo' - interval '2 hours' + id * interval '10 seconds',
			ts = timestamptz '2026-01-01 00:00:00+00' + id * interval '1.001 seconds' WHERE id = 7000");
	}
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$hi')"), 'completed',
		'after the bad values are gone the refresh completes');
	psql_ok("SELECT dpwin.drop_route('$route')");
}

# ---- max_encoded_bytes ------------------------------------------------------

{
	my $src = "$schema.big";
	my $route = "${tag}_big";
	my $tbl = 'big';
	my $pg_row = "id::text || '|' || (extract(epoch FROM w) * 1000000)::bigint::text || '|' || encode(convert_to(v, 'UTF8'), 'hex')";
	my $ch_row = "toString(id) || '|' || toString(toUnixTimestamp64Micro(w)) || '|' || lower(hex(v))";
	ch_ok("CREATE TABLE `$db`.`$tbl` (id Int64, w DateTime64(6, 'UTC'), v String) ENGINE = MergeTree ORDER BY id");

	# ~1 kB rows; ids whose low byte is 0x09, 0x0A, 0x0C, 0x0D or 0x20.
	psql_ok("CREATE TABLE $src (id bigint NOT NULL, w timestamptz NOT NULL, v text NOT NULL);
		INSERT INTO $src SELECT k * 256 + (ARRAY[9, 10, 12, 13, 32])[k % 5 + 1],
			timestamptz '$lo' + k * interval '33 seconds',
			repeat(chr(65 + k % 26), 900 + k % 200) || repeat('é', k % 7)
		  FROM generate_series(0, 2599) k;");
	psql_ok("SELECT dpwin.create_route('$route', '$src', 'w', '$srv', '$db', '$tbl',
		interval '1 day', interval '6 hours', parallelism => 2, batch_rows => 97, max_encoded_bytes => 65536)");

	my $seq = ch_log_seq();
	my ($state, $inv) = split /\|/, psql_ok("SELECT state, invocation_id FROM dpwin_refresh('$route', '$hi')");
	is($state, 'completed', 'max_encoded_bytes 65536, rows of ~1 kB: the refresh completes');
	my $exp = sorted_lines(psql_ok("SELECT $pg_row FROM $src WHERE w >= '$lo' AND w < '$hi'"));
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`$tbl` WHERE $ch_in")), $exp, 'the window is exact');

	my @log = ch_log_since($seq);
	for my $c (split /\n/, psql_ok("SELECT chunk_no || ' ' || bytes || ' ' || rows FROM dpwin.chunks WHERE invocation_id = '$inv' ORDER BY chunk_no"))
	{
		my ($chunk, $bytes, $nrows) = split / /, $c;
		my $n = grep { $_->{status} eq '200' && $_->{query} =~ /^INSERT INTO `[^`]*`\.`[^`]*_stg_${chunk}_0` \(.*\) FORMAT RowBinary/s } @log;
		# Each body holds at most 65536 bytes, and is cut only when the next
		# row (at most ~1.2 kB) would not fit.
		my $min = ceil($bytes / 65536);
		my $max = ceil($bytes / (65536 - 1300));
		ok($n >= $min && $n <= $max,
			"chunk $chunk: $bytes bytes in $nrows rows sent as $n INSERTs (between $min and $max)");
	}

	# One row larger than the bound.
	my ($uuid, $rows) = target_state($tbl, $ch_row);
	psql_ok("UPDATE $src SET v = repeat('x', 100000) WHERE id = 1300 * 256 + 9");
	my $w = psql_ok("SELECT to_char(w AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') FROM $src WHERE id = 1300 * 256 + 9");
	my $err = refresh_error($route);
	like($err, qr/ERROR:\s+54000: a row of chunk \d+ encodes to 100\d{3} bytes, more than max_encoded_bytes \(65536\)/,
		'a 100 kB row fails with 54000');
	like($err, qr/DETAIL:\s+Row with w = \Q$w\E/, "... naming the row by its window value ($w)");
	my ($uuid_after, $rows_after) = target_state($tbl, $ch_row);
	is($uuid_after, $uuid, 'the target is the same table');
	multiset_is($rows_after, $rows, 'the target rows are untouched');
	is(dpwin_tables_left(), 0, 'no staging or generation table left');

	psql_ok("SELECT dpwin.drop_route('$route')");
}

# ---- empty chunks, an empty window, columns in another order ----------------

{
	my $src = qq{$schema."Odd Src"};
	my $route = "${tag}_odd";
	my $pg_row = qq{COALESCE(encode(convert_to("Val ü", 'UTF8'), 'hex'), 'N') || '|' || id::text || '|'}
	  . qq{ || COALESCE((extract(epoch FROM "Wt") * 1000000)::bigint::text, 'N')};
	my $ch_row = "if(isNull(`Val ü`), 'N', lower(hex(assumeNotNull(`Val ü`)))) || '|' || toString(id) || '|'"
	  . " || if(isNull(`Wt`), 'N', toString(toUnixTimestamp64Micro(assumeNotNull(`Wt`))))";
	my $ch_in_odd = $ch_in =~ s/\bw\b/`Wt`/gr;
	my $ch_keep = "isNull(`Wt`) OR NOT ($ch_in_odd)";
	ch_ok("CREATE TABLE `$db`.`odd` (`Val ü` Nullable(String), id Int64, `Wt` Nullable(DateTime64(6, 'UTC')))"
		  . " ENGINE = MergeTree ORDER BY id");
	# the table's column order differs from the target's, and one column is not copied
	psql_ok(qq{CREATE TABLE $src ("Wt" timestamptz, skipped integer, id bigint NOT NULL, "Val ü" text);
		INSERT INTO $src SELECT timestamptz '$lo' + interval '6 hours' + g * interval '1 minute', g, g, 'v' || g
		  FROM generate_series(0, 299) g;
		INSERT INTO $src SELECT timestamptz '$lo' - g * interval '1 hour', g, 1000 + g, NULL FROM generate_series(1, 5) g;
		INSERT INTO $src SELECT NULL, g, 2000 + g, 'null window' FROM generate_series(1, 3) g;});
	psql_ok(qq{SELECT dpwin.create_route('$route', '$src', 'Wt', '$srv', '$db', 'odd',
		interval '1 day', interval '6 hours', parallelism => 3, columns => ARRAY['Val ü', 'id', 'Wt']::name[])});
	is(psql_ok("SELECT state FROM dpwin_refresh('$route', '$lo')"), 'completed',
		'quoted names, reordered columns: the window before fills the target');
	my ($state, $inv) = split /\|/, psql_ok("SELECT state, invocation_id FROM dpwin_refresh('$route', '$hi')");
	is($state, 'completed', 'a window with three empty chunks of four: completed');
	is(psql_ok("SELECT string_agg(chunk_no || ':' || rows, ' ' ORDER BY chunk_no) FROM dpwin.chunks"
		  . " WHERE invocation_id = '$inv' AND state = 'verified'"), '0:0 1:300 2:0 3:0',
		'every chunk verified, the empty ones with 0 rows');
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_in_odd")),
		sorted_lines(psql_ok(qq{SELECT $pg_row FROM $src WHERE "Wt" >= '$lo' AND "Wt" < '$hi'})),
		'the window is exact, column by column in the route order');
	my $keep = sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_keep"));
	is(scalar(@$keep), 5, 'the rows before the window are there');

	# a NULL-window row in the target, then a window with no rows at all
	ch_ok("INSERT INTO `$db`.`odd` VALUES ('target only', 3000, NULL)");
	$keep = sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_keep"));
	psql_ok(qq{DELETE FROM $src WHERE "Wt" >= '$lo' AND "Wt" < '$hi'});
	($state, $inv) = split /\|/, psql_ok("SELECT state, invocation_id FROM dpwin_refresh('$route', '$hi')");
	is($state, 'completed', 'an empty window: completed');
	is(psql_ok("SELECT metrics->>'source_rows' FROM dpwin.evidence WHERE invocation_id = '$inv'"),
		0, '... with 0 source rows in its evidence');
	is(ch_ok("SELECT count() FROM `$db`.`odd` WHERE $ch_in_odd") + 0, 0, 'the target window is empty now');
	multiset_is(sorted_lines(ch_ok("SELECT $ch_row FROM `$db`.`odd` WHERE $ch_keep")), $keep,
		'rows outside the window and NULL-window rows are kept');
	psql_ok("SELECT dpwin.drop_route('$route')");
}

drop_fixture();

done_testing();
