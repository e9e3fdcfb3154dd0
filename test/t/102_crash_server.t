# The crash matrix, part 3: PostgreSQL immediate shutdown and restart
# (test/sandbox.sh restart-pg: pg_ctl -m immediate, then start) during
# extraction, and right after the publication intent while the EXCHANGE is
# on its way: a lost reply, run with the endpoint in both query_id modes
# (docs/endpoint.md, "Query ids"):
#   intent        the EXCHANGE runs on ClickHouse regardless, then recover()
#                 finds it published;
#   intent_held   recover() while the dead coordinator's EXCHANGE still waits
#                 on the server (visible mode only: a server that shows
#                 query ids lets dpwin stop the journaled EXCHANGE before it
#                 exchanges itself; behind a proxy nothing can tell it that
#                 the statement will never run).
# Statements that must be on the server at the restart are holds
# (docs/endpoint.md): they run until the test releases them.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish exchange_re ch_rows);
use DpwinCrash;
use DpwinEndpoint qw(both_modes release wait_running log_entries);

my $db = "t102_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);

sub restart_pg
{
	my ($h, $label) = @_;
	sandbox_cmd('restart-pg');
	my ($rc, $out, $err) = bg_finish($h);
	like($err, qr/server closed the connection|terminating connection|connection to server was lost/,
		"$label: the caller lost its connection") or diag($err);
	ok(wait_until(\&pg_up, 60), "$label: PostgreSQL is back");
}

# --- during extraction ------------------------------------------------------------

{
	my $s = scenario('extracting');
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'hold', count => 4);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { chunks_in_state($s, 'running') == 2 }, 30),
		'extracting: two chunks are being loaded');
	ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/, 2, phase => 'holding'),
		'extracting: their INSERTs are on the server');
	restart_pg($h, 'extracting');
	release("INSERT INTO `$db`.`$s->{prefix}stg_");
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	settle_and_check($s, 'expired');
}

# --- right after the publication intent ----------------------------------------------

both_modes(sub {
	my ($mode) = @_;
	my $m = substr($mode, 0, 1);

	{
		my $s = scenario("intent_$m");
		my $seq = ch_log_seq();
		my $x = exchange_re($s->{t});
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => 1);
		my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
		ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 60), "$s->{tag}: the intent is committed");
		ok(wait_running($x, 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		restart_pg($h, $s->{tag});
		is(release("EXCHANGE TABLES `$db`.`$s->{t}` AND"), 1, "$s->{tag}: released after the restart");
		ok(wait_answered($seq, $x), "$s->{tag}: the EXCHANGE ran on ClickHouse all the same");
		check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
		$seq = ch_log_seq();
		settle_and_check($s, 'recover');
		is(scalar(grep { $_->{query} =~ $x } ch_log_since($seq)), 0, "$s->{tag}: recover sent no EXCHANGE");
	}

	return unless $mode eq 'visible';

	{
		my $s = scenario("intent_held_$m");
		my $x = exchange_re($s->{t});
		my $rename = "RENAME TABLE `$db`.`$s->{prefix}gen`";
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => 1);
		my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
		ok(wait_running($x, 1, phase => 'holding'), "$s->{tag}: the EXCHANGE waits on the server");
		restart_pg($h, $s->{tag});
		check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
		my $seq = ch_log_seq();
		# recover() exchanges, then renames the old target to the backup:
		# hold that rename, and let the dead coordinator's EXCHANGE go.
		fault(pattern => $rename, mode => 'hold', count => 1);
		my $rh = bg_psql("SELECT state FROM dpwin.recover('$s->{inv}')");
		ok(wait_running(qr/^\Q$rename\E/, 1, phase => 'holding'), "$s->{tag}: recover has exchanged");
		is(release("EXCHANGE TABLES `$db`.`$s->{t}` AND"), 0,
			"$s->{tag}: recover stopped the dead coordinator's EXCHANGE before exchanging");
		ok(wait_until(sub { scalar(grep { $_->{query} =~ $x } log_entries($seq)) == 2 }, 30),
			"$s->{tag}: both EXCHANGEs have ended");
		release($rename);
		my ($rc, $out, $err) = bg_finish($rh);
		is($out, 'completed', "$s->{tag}: recover completes") or diag($err);
		is(join(',', map { $_->{status} } grep { $_->{query} =~ $x } log_entries($seq)), '500,200',
			"$s->{tag}: the dead coordinator's EXCHANGE never ran; recover's did");
		is_deeply(ch_rows($s->{t}), $s->{new}, "$s->{tag}: the target is the new generation");
	}
});

crash_teardown();
done_testing();
