# The fixed cost of a refresh before its rows (docs/admission.md): the
# EXCHANGE probe is asked of ClickHouse once per database while PostgreSQL
# runs, remembered in shared memory by the database's UUID, and the first
# admission reads the server's facts and the target's at once.
#   - the first refresh in a database probes; the refresh of another fresh
#     target in the same database (a new coordinator) sends no probe
#     statement;
#   - a database dropped and created again (another UUID) is probed again,
#     and so is one whose probe was forgotten (as a restart forgets it);
#   - an EXCHANGE that the server refuses as unsupported fails the refresh
#     and makes the next one probe again;
#   - a refresh sends one statement of the server's facts and one of the
#     target's per admission, and the first two run at the same time:
#     either is answered while the other is held on the server.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault fresh_fixture drop_fixture create_event_source new_event_route new_uuid route_id
  invocation_prefix refresh_row_sql bg_psql bg_finish ch_rows after_refresh);
use DpwinEndpoint qw(release wait_running wait_logged running);

my $db = "t072_$$";
my $E = '2026-09-09 00:00:00+00';

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
create_event_source();

sub db_uuid
{
	my $u = ch_ok("SELECT toString(uuid) FROM system.databases WHERE name = '$db'");
	chomp $u;
	return $u;
}

# Refresh a new route to a fresh target; returns (state, the invocation's
# table prefix, the query log of the refresh).
sub refresh_fresh_target
{
	my ($tag) = @_;
	my ($route, $t) = new_event_route($tag);
	my $pre = ch_rows($t);
	my $inv = new_uuid();
	my $prefix = invocation_prefix(route_id($route), $inv);
	my $seq = ch_log_seq();
	my (undef, $state) = split /\|/, psql_ok(refresh_row_sql($route, $E, $inv));
	my @log = ch_log_since($seq);
	is_deeply(ch_rows($t), after_refresh($pre, $E), "$tag: the target holds the new window");
	return ($state, $prefix, @log);
}

# The probe's statements in a refresh's log: its scratch tables' CREATE,
# EXCHANGE and DROP, and a read of the database of its own.
sub probe_statements
{
	my ($prefix, @log) = @_;
	return grep {
		$_->{query} =~ /\Q${prefix}\Eprobe_/
		  || $_->{query} =~ /^SELECT engine, toString\(uuid\) FROM system\.databases/
	} @log;
}

# The probe's EXCHANGE statements in a refresh's log.
sub probe_exchanges
{
	my ($prefix, @log) = @_;
	return scalar(grep { $_->{query} =~ /^EXCHANGE TABLES `\Q$db\E`\.`\Q${prefix}\Eprobe_/ } @log);
}

# ---- the first refresh in a database probes, the next one does not ----------

my $uuid1 = db_uuid();
{
	my ($state, $prefix, @log) = refresh_fresh_target('first');
	is($state, 'completed', 'first: the refresh of a fresh target completes');
	my @probe = probe_statements($prefix, @log);
	is(scalar(grep { $_->{query} =~ /^CREATE TABLE `\Q$db\E`\.`\Q${prefix}\Eprobe_[0-9a-f]{16}_[ab]`/ } @probe), 2,
		'first: the probe creates its two scratch tables');
	is(probe_exchanges($prefix, @log), 1, 'first: ... and exchanges them');
}

{
	my ($state, $prefix, @log) = refresh_fresh_target('second');
	is($state, 'completed', 'second: the refresh of another fresh target in the database completes');
	is(scalar(probe_statements($prefix, @log)), 0, 'second: it sends no probe statement');
}

# ---- a database created again is probed again, and a forgotten one ----------

{
	ch_ok("DROP DATABASE `$db` SYNC");
	ch_ok("CREATE DATABASE `$db` ENGINE = Atomic");
	my $uuid2 = db_uuid();
	isnt($uuid2, $uuid1, 'the database created again has another UUID');
	my ($state, $prefix, @log) = refresh_fresh_target('recreated');
	is($state, 'completed', 'recreated: the refresh completes');
	is(probe_exchanges($prefix, @log), 1, 'recreated: the database is probed again');
	($state, $prefix, @log) = refresh_fresh_target('recreated_again');
	is(probe_exchanges($prefix, @log), 0, 'recreated: ... once');

	psql_ok("SELECT dpwin_test.forget_exchange_probe('sandbox_ch', '$db')");
	($state, $prefix, @log) = refresh_fresh_target('forgotten');
	is($state, 'completed', 'forgotten: the refresh completes');
	is(probe_exchanges($prefix, @log), 1, 'forgotten: the database is probed again');
}

# ---- an EXCHANGE refused as unsupported: the next refresh probes again -------

{
	my ($route, $t) = new_event_route('refused');
	my $pre = ch_rows($t);
	my $inv = new_uuid();
	fault(pattern => "EXCHANGE TABLES `$db`.`$t` AND", mode => 'error', code => 48, count => 1);
	my $err = psql_err(refresh_row_sql($route, $E, $inv));
	like($err // '', qr/^HV000: ClickHouse error 48 while exchanging the target with its new generation/,
		'refused: the refresh whose EXCHANGE is refused fails with the server\'s error');
	is_deeply(ch_rows($t), $pre, 'refused: the target is the old generation');
	my ($state, $prefix, @log) = refresh_fresh_target('after_refused');
	is($state, 'completed', 'refused: the next refresh completes');
	is(probe_exchanges($prefix, @log), 1, 'refused: ... and probes the database again');
}

# ---- admission's statements ----------------------------------------------------

{
	my ($state, $prefix, @log) = refresh_fresh_target('admission');
	is($state, 'completed', 'admission: the refresh completes');
	my @version = grep { $_->{query} =~ /^SELECT version\(\)/ } @log;
	my @target = grep { $_->{query} =~ /^SELECT 'D', engine/ } @log;
	is(scalar(@version), 1, 'admission: the server\'s facts are read once');
	is(scalar(@target), 2, 'admission: the target\'s facts once per admission: at the start and before the build');
	is(scalar(grep { $_->{query} =~ /system\.(databases|functions|row_policies|projections)/ } @log),
		scalar(@target), 'admission: no other statement reads what admission reads');
	like($target[0]{query} // '', qr/\nUNION ALL SELECT 'U', toString\(uuid\), '', '', '', '', '' FROM system\.databases WHERE name = '\Q$db\E'\n/,
		'admission: the target\'s statement reads the database\'s UUID');
}

# The first two at the same time: hold either on the server, and the
# other is answered meanwhile (one after the other, the second would not
# be sent while the first is held).
for my $held (qw(target server))
{
	my ($route) = new_event_route("overlap_$held");
	my $inv = new_uuid();
	my $target = "SELECT 'D', engine, '', '', '', '', '' FROM system.databases WHERE name = '$db'";
	my $server = "SELECT version(), (SELECT count() FROM system.tables WHERE database = 'system' AND name = 'projections')";
	my ($hold, $other) = $held eq 'target' ? ($target, $server) : ($server, $target);
	fault(pattern => $hold, mode => 'hold', count => 1);
	my $seq = ch_log_seq();
	my $h = bg_psql(refresh_row_sql($route, $E, $inv));
	ok(wait_running(qr/^\Q$hold\E/, 1, phase => 'holding'), "overlap: the $held facts wait on the server");
	ok(wait_logged($seq, qr/^\Q$other\E/, answered => 1, timeout => 30), "overlap: ... while the other statement is answered");
	is(scalar(grep { $_->{phase} eq 'holding' && $_->{query} =~ /^\Q$hold\E/ } running()), 1,
		"overlap: ... the $held facts still held");
	is(release($hold), 1, "overlap: the $held facts are released");
	my ($rc, $out, $err) = bg_finish($h);
	is($rc, 0, 'overlap: the refresh completes') or diag($err);
	like($out, qr/\|completed\|/, 'overlap: completed');
}

ch_control('POST', '/faults/clear');
drop_fixture();

done_testing();
