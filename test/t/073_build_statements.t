# The statements the coordinator sends to build and check a generation, as
# the endpoint's query log shows them (docs/design.md, "The conversation
# with ClickHouse"): for a 7-chunk refresh of a day-partitioned target of
# 30 kept days, and of one of 365.  Counted by connection, from the
# query_id each statement carries: the coordinator's first connection
# sends its statements one after another, so each of them is one in
# sequence; the second one reads what does not wait for them meanwhile.
#
#   first connection: DROP and CREATE of the generation, the clone's ALTER,
#     one count (the target's kept rows and the clone's baseline), the
#     staging tables' copies check, the ATTACH of the staged parts, one
#     read of system.parts (generation and target)
#   second connection: the target's partitions by minmax (while the
#     generation is created), the generation's copy check (while the clone
#     runs), one read of system.parts (target and clone, while the count
#     runs), the staged parts (while the target is admitted again)
#
# A statement added back to the first connection (a second parts read, a
# count of its own) fails these counts.  Every check still runs: the
# target is still the kept rows plus the window afterwards.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture create_event_source new_uuid refresh_row_sql ch_rows
  pg_rows kept micros multiset_is route_id invocation_prefix);

my $db = "t073_$$";
my $E = '2026-09-09 00:00:00+00';

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
# 7 days of source rows, one an hour, through the window ending 09-09
create_event_source(from => '2026-09-02 00:00:00+00', step => '1 hour', rows => 7 * 24);

# A statement's kind, by its text; undef for one outside the build.
sub kind
{
	my ($q, $t, $prefix) = @_;
	my $gen = "${prefix}gen";
	return 'drop gen' if $q =~ /^DROP TABLE IF EXISTS `\Q$db\E`\.`\Q$gen\E`$/;
	return 'create gen' if $q =~ /^CREATE TABLE `\Q$db\E`\.`\Q$gen\E` AS /;
	return 'minmax' if $q =~ /__dpwin_p/;
	return 'gen check' if $q =~ /^SELECT \* FROM \(SELECT name AS t, 'T', engine_full.* IN \('\Q$gen\E'\)/s;
	return 'copies check' if $q =~ /^SELECT \* FROM \(SELECT name AS t, 'T', engine_full.*'\Q${prefix}\Estg_/s;
	return 'clone' if $q =~ /^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH PARTITION .* FROM `\Q$db\E`\.`\Q$t\E`/s;
	return 'attach staged' if $q =~ /^ALTER TABLE `\Q$db\E`\.`\Q$gen\E` ATTACH PARTITION .* FROM `\Q$db\E`\.`\Q${prefix}\Estg_/s;
	return 'parts' if $q =~ /hash_of_all_files/;
	return 'count' if $q =~ /^SELECT countIf\(|count\(\) FROM `\Q$db\E`\.`\Q$gen\E`/;
	return 'delete' if $q =~ /DELETE/;
	return 'digest' if $q =~ /sipHash128ReferenceKeyed/ && $q =~ /`\Q$gen\E`|`\Q$t\E`/;
	return undef;
}

# One refresh of a fresh day-partitioned target holding $days kept days
# (24 rows a day) before the window and old rows inside it.
sub build_statements
{
	my ($days) = @_;
	my $t = "tgt_$days";
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
		  . " ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1");
	ch_ok("INSERT INTO `$db`.`$t` SELECT 100000 + number,"
		  . " toDateTime64('2026-09-02 00:00:00', 6, 'UTC') - toIntervalSecond(3600 * (number + 1)),"
		  . " concat('kept ', toString(number % 13)) FROM numbers(" . ($days * 24) . ")",
		params => { max_partitions_per_insert_block => 0 });
	ch_ok("INSERT INTO `$db`.`$t` VALUES (1, '2026-09-03 10:00:00', 'old in window'), (2, NULL, 'null')");
	my $partitions = ch_ok("SELECT uniqExact(partition_id) FROM system.parts WHERE database = '$db' AND table = '$t' AND active");
	chomp $partitions;
	my $before = ch_rows($t);
	my $route = unique_name("${db}_$days");
	psql_ok("SELECT dpwin.create_route('$route', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', '$t',"
		  . " interval '7 days', interval '1 day', parallelism => 2)");
	my $inv = new_uuid();
	my $prefix = invocation_prefix(route_id($route), $inv);
	my $seq = ch_log_seq();
	like(psql_ok(refresh_row_sql($route, $E, $inv)), qr/\|completed\|/, "$days days: the refresh completes");
	is(psql_ok("SELECT count(*) FROM dpwin.chunks WHERE invocation_id = '$inv' AND state = 'verified'"), 7,
		"$days days: seven chunks, one a day");
	my $lo = '2026-09-02 00:00:00+00';
	multiset_is(ch_rows($t), [ sort(@{ kept($before, micros($lo), micros($E)) }, @{ pg_rows("w >= '$lo' AND w < '$E'") }) ],
		"$days days: the target is the kept rows and the window");

	my (@first, @second, @unknown);
	for my $l (ch_log_since($seq))
	{
		next unless $l->{query_id} =~ /^dpwin-\Q$inv\E-(.*)$/;
		my $rest = $1;
		next if $rest =~ /^w[0-9]+-/;    # a chunk worker's
		my $k = kind($l->{query}, $t, $prefix);
		next unless defined $k;
		if ($rest =~ /^2-/) { push @second, $k; }
		else { push @first, $k; }
	}
	return ($partitions, \@first, \@second);
}

for my $days (30, 365)
{
	my ($partitions, $first, $second) = build_statements($days);
	cmp_ok($partitions, '>=', $days, "$days days: the target has $partitions partitions");
	is("@$first", 'drop gen create gen clone count copies check attach staged parts',
		"$days days: the first connection sends 7 statements to build and check the generation");
	is(scalar(@$first), 7, "$days days: ... 7 in sequence");
	is(join(' ', sort @$second), 'gen check minmax parts parts',
		"$days days: the second connection reads the minmax judgement, the generation's copy check, the clone's parts and the staged parts meanwhile");
}

drop_fixture();
done_testing();
