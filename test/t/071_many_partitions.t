# A refresh of a target with many daily partitions (src/generation.c).
#
# The target holds 240 days before the window, each its own partition,
# with NULL window rows and duplicates; the one-day window's partition is
# replaced.  After the refresh the target must equal, as a multiset, the
# kept rows plus the source's window.  The endpoint's query log must show
# that the kept partitions were cloned in one ALTER TABLE statement (the
# server parses 256 KiB of a statement; 240 partitions' clauses take some
# 30 kB), and that the generation's rows inside the window were counted
# with a filter the server prunes by its parts' minmax indexes: on the
# backup (the target before the refresh, every partition), the server's
# plan for it reads the window's part and none of the 240 days before it.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture create_event_source new_uuid refresh_row_sql ch_rows
  after_refresh multiset_is);

my $db = "t071_$$";
my $E = '2026-09-09 00:00:00+00';
my $days = 240;

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
create_event_source();

# 240 days before the window, 50 rows a day, duplicates and NULL windows
my $t = 'tgt_many';
ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
	  . " ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1");
ch_ok("INSERT INTO `$db`.`$t` SELECT 100000 + number,"
	  . " if(number % 97 = 0, NULL, toDateTime64('2026-09-08 00:00:00', 6, 'UTC') - toIntervalSecond(1728 * (number + 1))),"
	  . " concat('kept ', toString(number % 13)) FROM numbers(" . ($days * 50) . ")",
	params => { max_partitions_per_insert_block => 0 });
ch_ok("INSERT INTO `$db`.`$t` VALUES (1, '2026-09-01 00:00:00', 'dup'), (1, '2026-09-01 00:00:00', 'dup'),"
	  . " (2, '2026-09-08 10:00:00', 'old in window')");
my $partitions = ch_ok("SELECT uniqExact(partition_id) FROM system.parts WHERE database = '$db' AND table = '$t' AND active");
cmp_ok($partitions, '>=', $days, "the target has $partitions partitions");
my $before = ch_rows($t);
my $route = unique_name("${db}_many");
psql_ok("SELECT dpwin.create_route('$route', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', '$t',"
	  . " interval '1 day', interval '6 hours', parallelism => 2)");

my $inv = new_uuid();
my $seq = ch_log_seq();
my $row = psql_ok(refresh_row_sql($route, $E, $inv));
like($row, qr/\|completed\|/, 'the refresh completes');
my (undef, undef, undef, $backup) = split /\|/, $row;
multiset_is(ch_rows($t), after_refresh($before, $E), 'the target is the kept rows and the window');

my @log = ch_log_since($seq);
my @clone = grep { $_->{query} =~ /^ALTER TABLE `\Q$db\E`\.`[^`]*_gen` ATTACH PARTITION ID '[^']*' FROM `\Q$db\E`\.`\Q$t\E`/ } @log;
is(scalar(@clone), 1, 'the kept partitions are cloned in one statement');
my $clauses = () = ($clone[0]{query} // '') =~ /ATTACH PARTITION ID '[^']*' FROM `\Q$db\E`\.`\Q$t\E`/g;
is($clauses, $partitions - 1, 'that statement attaches every partition but the window\'s');

# The count of the generation's rows inside the window, replayed on the
# backup: its filter reads the window's partition only.
my ($count) = grep { $_->{query} =~ /\(SELECT count\(\) FROM `\Q$db\E`\.`[^`]*_gen` PREWHERE / } @log;
ok($count, 'the generation\'s rows inside the window are counted');
my ($filter) = ($count->{query} // '') =~ /\(SELECT count\(\) FROM `[^`]*`\.`[^`]*_gen` PREWHERE (.*?)\), \(SELECT count\(\) FROM \S+ PREWHERE isNull\(/s;
ok(defined $filter, 'the count\'s filter is found');
my $plan = ch_ok("EXPLAIN indexes = 1 SELECT count() FROM `$db`.`$backup` PREWHERE " . ($filter // '0'));
my @parts = $plan =~ /Parts: ([0-9]+)\/([0-9]+)/g;
my ($read, $all) = @parts >= 2 ? ($parts[-2], $parts[1]) : (undef, undef);
cmp_ok($all // 0, '>=', $days, "the backup has $days and more parts");
ok(defined $read && $read >= 1 && $read <= 2,
	'the filter selects the window\'s part (and the NULL partition\'s) by the minmax index, not every part (' . ($read // '?') . ' of ' . ($all // '?') . ')');
is(ch_ok("SELECT count() FROM `$db`.`$backup` PREWHERE " . ($filter // '0')) =~ s/\s+\z//r, '1', 'the backup holds one row inside the window');

psql_ok("SELECT dpwin.drop_route('$route')");
drop_fixture();
done_testing();
