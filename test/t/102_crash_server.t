# The crash matrix, part 3: PostgreSQL immediate shutdown and restart
# (test/sandbox.sh restart-pg: pg_ctl -m immediate, then start) during
# extraction, and right after the publication intent while the EXCHANGE is
# on its way (it runs on ClickHouse regardless).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish exchange_re);
use DpwinCrash;
use Time::HiRes qw(usleep);

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
	fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'delay', ms => 3000, count => 4);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { chunks_in_state($s, 'running') == 2 }, 30),
		'extracting: two chunks are being loaded');
	usleep(300_000);
	restart_pg($h, 'extracting');
	check_after_fault($s, which => 'old', state => 'extracting', outcome => '');
	settle_and_check($s, 'expired');
}

# --- right after the publication intent ----------------------------------------------

{
	my $s = scenario('intent');
	my $seq = ch_log_seq();
	my $x = exchange_re($s->{t});
	fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'delay', ms => 2000, count => 1);
	my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
	ok(wait_until(sub { state_of($s->{inv}) eq 'publishing' }, 60), 'intent: the intent is committed');
	restart_pg($h, 'intent');
	ok(wait_answered($seq, $x), 'intent: the EXCHANGE ran on ClickHouse all the same');
	check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	$seq = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(grep { $_->{query} =~ $x } ch_log_since($seq)), 0, 'intent: recover sent no EXCHANGE');
}

crash_teardown();
done_testing();
