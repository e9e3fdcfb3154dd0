# Bounded backups (docs/guide.md, "Retention"): keep_backups is applied
# after each publication, once the caller has its result; under an hourly
# schedule the target's database never holds more than keep_backups
# backups of the route, the newest by publication, and a backfill keeps one
# more (the target as it was before it) while it runs; a backup that an
# unfinished publication names survives until that publication is settled.
# Counted in ClickHouse, not in the journal.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fresh_fixture drop_fixture drop_routes ch_rows pg_rows multiset_is fault
  backup_tables coordinators_gone);
use DpwinEndpoint qw(release wait_running);

my $db = "t131_$$";
fresh_fixture($db, $db);
ch_control('POST', '/faults/clear');
psql_ok("CREATE TABLE $db.src (id bigint NOT NULL, w timestamptz NOT NULL, v text);
	INSERT INTO $db.src
		SELECT g, timestamptz '2026-09-07 00:00:00+00' + g * interval '7 minutes 0.25 seconds', 'src ' || (g % 5)
		FROM generate_series(0, 500) g;");
ch_ok("CREATE TABLE `$db`.`tgt` (id Int64, w DateTime64(6, 'UTC'), v Nullable(String))"
	  . " ENGINE = MergeTree PARTITION BY toYYYYMMDD(w) ORDER BY id");
ch_ok("INSERT INTO `$db`.`tgt` VALUES (1, '2026-01-01 00:00:00', 'kept')");
my $r = unique_name('t131');
my $seq = ch_log_seq();

# --- options, refused before any I/O --------------------------------------------

my $create = "SELECT dpwin.create_route('$r', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', 'tgt',"
  . " interval '1 hour', interval '30 minutes'";
like(psql_err("$create, keep_backups => 0)"), qr/^22023: keep_backups must be at least 1, not 0/,
	'keep_backups 0 is refused (a rollback needs a backup)');
like(psql_err("$create, stale_after => interval '0')"), qr/^22023: stale_after "00:00:00" is not positive/,
	'stale_after 0 is refused');
like(psql_err("$create, stale_after => interval '1 month')"), qr/^22023: stale_after "1 mon" has a month or year part/,
	'stale_after of a month is refused');
is(psql_ok("SELECT count(*) FROM dpwin.route WHERE route_name = '$r'"), 0, 'no route was created');
psql_ok("$create)");
is(psql_ok("SELECT keep_backups || '|' || stale_after FROM dpwin.routes WHERE route_name = '$r'"), '3|01:00:00',
	'defaults: three backups, stale after one lookback');
psql_ok("SELECT dpwin.alter_route('$r', keep_backups => 2, stale_after => interval '3 hours')");
is(psql_ok("SELECT keep_backups || '|' || stale_after FROM dpwin.routes WHERE route_name = '$r'"), '2|03:00:00',
	'alter_route sets them');
like(psql_err("SELECT dpwin.alter_route('$r', keep_backups => -1)"), qr/^22023: keep_backups must be at least 1, not -1/,
	'alter_route refuses keep_backups -1');
is(scalar(ch_log_since($seq)), 0, 'none of this sent a statement to ClickHouse');
my $rid = psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$r'");

# The journal's backups of the route, newest publication first.
sub journal_backups
{
	my ($where) = @_;
	return [ split /\n/, psql_ok("SELECT p.backup_table FROM dpwin.publication p JOIN dpwin.invocation i USING (invocation_id)"
			  . " WHERE i.route_id = $rid AND p.outcome = 'published' $where ORDER BY p.intent_at DESC") ];
}

sub hour { my ($h) = @_; return psql_ok("SELECT timestamptz '2026-09-08 00:00:00+00' + $h * interval '1 hour'"); }

# --- an hourly schedule ------------------------------------------------------

my $max = 0;
for my $h (1 .. 8)
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$r', '" . hour($h) . "')"), 'completed', "hour $h published");
	coordinators_gone() or BAIL_OUT('a coordinator did not exit');
	my $n = scalar(@{ backup_tables($db, $r) });
	$max = $n if $n > $max;
}
is($max, 2, 'under an hourly schedule the database never held more than keep_backups = 2 backups');
is_deeply(backup_tables($db, $r), [ sort @{ journal_backups('')}[0, 1] ], 'the two kept are the two newest publications');
is(psql_ok("SELECT count(*) FROM dpwin.publication p JOIN dpwin.invocation i USING (invocation_id)"
	  . " WHERE i.route_id = $rid AND p.backup_dropped_at IS NOT NULL"), 6, 'the journal records the six dropped');
is(psql_ok("SELECT backups_kept FROM dpwin.health WHERE route_name = '$r'"), 2, 'dpwin.health counts two backups');

# --- off the caller's path ---------------------------------------------------

fault(pattern => "DROP TABLE IF EXISTS `$db`.`_dpwin_backup_${rid}_", mode => 'hold', count => 1);
is(psql_ok("SELECT state FROM dpwin_refresh('$r', '" . hour(9) . "')"), 'completed',
	'hour 9 returns while the retention\'s DROP is held in the server');
ok(wait_running(qr/^DROP TABLE IF EXISTS `\Q$db\E`\.`_dpwin_backup_${rid}_/, 1, phase => 'holding'),
	'the DROP was sent after the result, and is held');
is(scalar(@{ backup_tables($db, $r) }), 3, 'three backups until the DROP runs');
release("_dpwin_backup_${rid}_");
ok(coordinators_gone(), 'the coordinator exits once the DROP ran');
is(scalar(@{ backup_tables($db, $r) }), 2, 'then two');

# --- an unfinished publication's backup survives ----------------------------

# Hour 9's invocation as a crash after its EXCHANGE leaves it: published,
# evidence or completion not yet journaled.  Such an invocation does not
# stop the next refresh.
my ($inv9, $b9) = split /\|/, psql_ok("SELECT i.invocation_id, p.backup_table FROM dpwin.invocation i"
	  . " JOIN dpwin.publication p USING (invocation_id) WHERE i.route_id = $rid ORDER BY i.created_at DESC LIMIT 1");
psql_ok("UPDATE dpwin.invocation SET state = 'evidenced', finished_at = NULL WHERE invocation_id = '$inv9'");
for my $h (10, 11)
{
	is(psql_ok("SELECT state FROM dpwin_refresh('$r', '" . hour($h) . "')"), 'completed', "hour $h published");
	ok(coordinators_gone(), "hour $h: the coordinator is gone");
}
ok((grep { $_ eq $b9 } @{ backup_tables($db, $r) }), 'the backup that the unfinished publication names is kept beyond keep_backups');
is(scalar(@{ backup_tables($db, $r) }), 3, 'it and the two newest');
is(psql_ok("SELECT state FROM dpwin.recover('$inv9')"), 'completed', 'recover() settles that publication');
ok(coordinators_gone(), 'the recovery\'s coordinator is gone');
ok(!(grep { $_ eq $b9 } @{ backup_tables($db, $r) }), 'and its retention drops that backup now');
is(scalar(@{ backup_tables($db, $r) }), 2, 'two backups again');

# A publication in flight that names a kept backup as the table it puts in
# place (as a rollback's intent does) and has not settled: that backup is
# not dropped, even beyond keep_backups.  The invocation is written here as
# such a publication leaves it after its EXCHANGE (published, not
# completed), which does not stop the next refresh.
my ($oldest) = @{ journal_backups("AND p.backup_dropped_at IS NULL") }[-1];
my $x = psql_ok("SELECT gen_random_uuid()");
psql_ok("INSERT INTO dpwin.invocation (invocation_id, route_id, target_id, interval_end, window_lo, window_hi,"
	  . " config_fingerprint, lease_epoch, state, caller_role)"
	  . " SELECT '$x', route_id, target_id, interval_end, window_lo, window_hi, config_fingerprint, lease_epoch,"
	  . " 'published', caller_role FROM dpwin.invocation WHERE route_id = $rid ORDER BY created_at DESC LIMIT 1;"
	  . " INSERT INTO dpwin.publication (invocation_id, target_id, target_uuid_before, generation_table,"
	  . " generation_uuid, backup_table, lease_epoch, outcome)"
	  . " SELECT '$x', target_id, gen_random_uuid(), '$oldest', gen_random_uuid(), '_dpwin_backup_${rid}_in_flight',"
	  . " lease_epoch, 'published' FROM dpwin.invocation WHERE invocation_id = '$x'");
is(psql_ok("SELECT state FROM dpwin_refresh('$r', '" . hour(12) . "')"), 'completed', 'hour 12 published');
ok(coordinators_gone(), 'hour 12: the coordinator is gone');
ok((grep { $_ eq $oldest } @{ backup_tables($db, $r) }), 'the backup that a publication in flight names is kept beyond keep_backups');
is(scalar(@{ backup_tables($db, $r) }), 3, 'it and the two newest');
psql_ok("DELETE FROM dpwin.publication WHERE invocation_id = '$x'; DELETE FROM dpwin.invocation WHERE invocation_id = '$x'");
is(psql_ok("SELECT state FROM dpwin_refresh('$r', '" . hour(13) . "')"), 'completed', 'hour 13 published, nothing in flight');
ok(coordinators_gone(), 'hour 13: the coordinator is gone');
ok(!(grep { $_ eq $oldest } @{ backup_tables($db, $r) }), 'then that backup is dropped');
is(scalar(@{ backup_tables($db, $r) }), 2, 'two backups again');

# --- a backfill keeps one more ------------------------------------------------

my @before = @{ backup_tables($db, $r) };
my $target_before = ch_rows('tgt');
psql_ok("CALL dpwin.backfill('$r', '2026-09-07 00:00:00+00', '2026-09-07 04:00:00+00')");
ok(coordinators_gone(), 'the backfill\'s coordinators are gone');
my $bb = psql_ok("SELECT backup_table FROM dpwin.backfills WHERE route_name = '$r'");
is_deeply(backup_tables($db, $r), [ sort(@before, $bb) ], 'after a four-window backfill: keep_backups plus the backfill\'s one');
multiset_is(ch_rows($bb), $target_before, 'the backfill\'s backup is the target as it was before it');
is(psql_ok("SELECT count(*) FROM dpwin.publication p JOIN dpwin.invocation i USING (invocation_id)"
	  . " WHERE i.backfill_id IS NOT NULL AND i.route_id = $rid AND p.backup_dropped_at IS NOT NULL"), 3,
	'the three later windows dropped the generation they replaced, the backfill\'s own');
is(psql_ok("SELECT state FROM dpwin_refresh('$r', '" . hour(14) . "')"), 'completed', 'the next hour is published');
ok(coordinators_gone(), 'its coordinator is gone');
is(scalar(@{ backup_tables($db, $r) }), 2, 'once the backfill is completed its backup is one of the kept_backups again');
multiset_is(ch_rows('tgt'), [ '1|' . psql_ok("SELECT (extract(epoch FROM timestamptz '2026-01-01 00:00:00+00') * 1000000)::bigint") . '|kept',
		@{ pg_rows("(w >= '2026-09-07 00:00:00+00' AND w < '2026-09-07 04:00:00+00')"
			  . " OR (w >= '2026-09-08 00:00:00+00' AND w < '" . hour(14) . "')") } ],
	'the target holds every published window and its own row');

# --- drop_backups stays -------------------------------------------------------

is(psql_ok("SELECT count(*) FROM dpwin.drop_backups('$r', 1)"), 1, 'drop_backups(route, 1) drops one more');
is(scalar(@{ backup_tables($db, $r) }), 1, 'one backup left');
is(psql_ok("SELECT backups_kept FROM dpwin.health WHERE route_name = '$r'"), 1, 'dpwin.health counts it');

drop_routes($r);
drop_fixture();
done_testing();
