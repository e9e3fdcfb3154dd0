# Faults as hard as a real server's, on partitioned targets too.
#
# A server cannot stop an EXCHANGE (or a long INSERT) that already runs:
# KILL QUERY marks it killed and it goes on, and KILL QUERY ... SYNC waits
# until it has ended.  The endpoint's stubborn hold (mode=stubborn,
# docs/endpoint.md) does the same: KILL QUERY passes over it until the test
# releases it, KILL QUERY ... SYNC answers only then, and the statement
# runs.
#   unsettled   the EXCHANGE outlives request_timeout and every KILL QUERY
#               dpwin sends while settling it: dpwin gives up (its KILL
#               QUERY ... SYNC did not answer), the invocation stays publishing
#               and no second EXCHANGE is sent, not by the refresh and not
#               by a recover() while it still runs.  Released, the first
#               EXCHANGE runs; recover() then settles the invocation
#               exactly once, sending no EXCHANGE.  Unpartitioned and
#               day-partitioned targets.
#   restarts    on day- and month-partitioned targets, a ClickHouse restart
#               (test/sandbox.sh restart-ch) and a PostgreSQL immediate
#               restart (restart-pg) at each publication step: the
#               EXCHANGE held on the server, and the RENAME that keeps the
#               old table as the backup, after the exchange, held (for
#               the ClickHouse restart mode=hold_vanish: the restart loses
#               the held statement's reply).
# After every fault the target is exactly the old or the new generation
# (rows compared as multisets with the PostgreSQL source, not through
# dpwin's digests) and recovery converges (test/lib/DpwinCrash.pm).
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish exchange_re exchanges uuid_of);
use DpwinCrash;
use DpwinEndpoint qw(set_query_ids release running wait_running holds only_held_timed_out hedge);

my $db = "t107_$$";
crash_setup($db);
set_query_ids('visible');

my %shapes = (
	day => "PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	month => "PARTITION BY toYYYYMM(w) ORDER BY id SETTINGS allow_nullable_key = 1",
	flat => "ORDER BY id");

# A foreign server for the same endpoint with a request timeout that only
# a held statement reaches (only_held_timed_out() checks that no other
# statement did on a slow machine).
my $slow = "${db}_slow";
psql_ok("CREATE SERVER $slow FOREIGN DATA WRAPPER dpwin_clickhouse"
	  . " OPTIONS (url '$ENV{DPWIN_CH_URL}', request_timeout '5s');
	CREATE USER MAPPING FOR CURRENT_USER SERVER $slow
	  OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');");

# --- the endpoint: a stubborn hold outlives KILL QUERY, SYNC waits for it ----------

{
	my $probe = "SELECT 107 AS stubborn_probe";
	fault(pattern => 'stubborn_probe', mode => 'stubborn', count => 1);
	my $seq = ch_log_seq();
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		my ($code) = ch($probe, params => { query_id => "t107-probe-$$" });
		exit($code == 200 ? 0 : 1);
	}
	ok(wait_running(qr/stubborn_probe/, 1, phase => 'holding'), 'endpoint: the statement is held');
	my ($qid) = map { $_->{query_id} } grep { $_->{query} =~ /stubborn_probe/ } running();
	for my $i (1 .. 2)
	{
		ch_ok("KILL QUERY WHERE query_id = '$qid' ASYNC");
		is(scalar(grep { $_->{query} =~ /stubborn_probe/ && $_->{phase} eq 'holding' } running()), 1,
			"endpoint: KILL QUERY ... ASYNC $i answers; the statement is still held");
	}
	is(ch_ok("SELECT count() FROM system.processes WHERE query_id = '$qid'") + 0, 1,
		'endpoint: and system.processes still lists it under its query_id');
	my @h = grep { $_->{query} =~ /stubborn_probe/ } holds();
	is(@h ? $h[0]{kills} : -1, 2, 'endpoint: the hold counts the two KILLs it outlived');
	# KILL QUERY ... SYNC answers once the statement has ended
	my $killer = fork() // die "fork: $!";
	if ($killer == 0)
	{
		my ($code) = ch("KILL QUERY WHERE query_id = '$qid' SYNC");
		exit($code == 200 ? 0 : 1);
	}
	ok(wait_running(qr/^KILL QUERY WHERE query_id = '\Q$qid\E' SYNC/, 1), 'endpoint: KILL QUERY ... SYNC waits on the server');
	is(scalar(grep { $_->{query} =~ /^KILL QUERY WHERE query_id = '\Q$qid\E' SYNC/ } log_entries_since($seq)), 0,
		'endpoint: and has not answered while the statement runs');
	is(release('stubborn_probe'), 1, 'endpoint: released');
	waitpid($pid, 0);
	is($? >> 8, 0, 'endpoint: the released statement ran and answered');
	waitpid($killer, 0);
	is($? >> 8, 0, 'endpoint: then KILL QUERY ... SYNC answered');
	my @l = grep { $_->{query} =~ /stubborn_probe|SYNC$/ && $_->{query} !~ /ASYNC/ } log_entries_since($seq);
	is(join(',', map { $_->{query} =~ /^KILL/ ? 'kill' : $_->{status} } @l), '200,kill',
		'endpoint: the statement ended first, then the KILL answered');
}

sub log_entries_since { return DpwinEndpoint::log_entries(@_); }

# dpwin's answer when it cannot settle statement $qid: it is listed in
# system.processes, and KILL QUERY ... SYNC, which waits on the server for
# a statement that ignores it, does not answer within the settling time.
# Nothing proves that the statement ended, so nothing is published.
sub unsettled_re
{
	my ($qid) = @_;
	$qid //= 'no EXCHANGE runs';
	return qr/^08006: ClickHouse server ".*" did not answer in time while settling query \Q$qid\E$/;
}

# --- the EXCHANGE cannot be settled ----------------------------------------------

my $unsettled = 0;
for my $shape ('flat', 'day')
{
	my $s = scenario("unsettled_$shape", server => $slow, engine => $shapes{$shape});
	my $seq = ch_log_seq();
	fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'stubborn', count => 1);
	my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
	$unsettled++;
	my ($qid) = map { $_->{query_id} } grep { $_->{query} =~ exchange_re($s->{t}) } running();
	like($err, unsettled_re($qid), "$s->{tag}: the refresh gives up settling its EXCHANGE") or diag($err);
	ok(wait_running(exchange_re($s->{t}), 1, phase => 'holding'), "$s->{tag}: the EXCHANGE still runs on the server");
	only_held_timed_out($s, $seq, qr/^EXCHANGE TABLES|^KILL QUERY/);
	my @kills = grep { $_->{query} =~ /^KILL QUERY WHERE query_id = '\Q$qid\E' SYNC/ } running();
	ok(@kills >= 1, "$s->{tag}: dpwin's KILL QUERY ... SYNC for it still waits on the server (" . scalar(@kills) . ')');
	is(scalar(grep { $_->{query} =~ /^KILL QUERY WHERE query_id = '\Q$qid\E'/ } ch_log_since($seq)), 0,
		"$s->{tag}: and none of them has answered");
	is(scalar(exchanges($seq, $s->{t})), 0, "$s->{tag}: no EXCHANGE was answered");
	is(scalar(grep { $_->{query} =~ exchange_re($s->{t}) } running()), 1,
		"$s->{tag}: and no second EXCHANGE was sent: one runs");
	check_after_fault($s, which => 'old', state => 'publishing', outcome => '');

	if ($shape eq 'flat')
	{
		# recover() meets the same running statement: it must wait, not exchange.
		my $rerr = psql_err("SELECT * FROM dpwin.recover('$s->{inv}')");
		like($rerr, unsettled_re($qid),
			"$s->{tag}: recover() while it runs: it cannot settle it either") or diag($rerr);
		is(scalar(grep { $_->{query} =~ exchange_re($s->{t}) } running()), 1,
			"$s->{tag}: recover() sent no EXCHANGE");
		check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
	}

	is(release("EXCHANGE TABLES `$db`.`$s->{t}`"), 1, "$s->{tag}: released");
	ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: the first EXCHANGE has run");
	check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
	my $seq2 = ch_log_seq();
	settle_and_check($s, 'recover');
	is(scalar(exchanges($seq2, $s->{t})), 0, "$s->{tag}: recover() sent no EXCHANGE");
	is(join(',', map { $_->{status} } exchanges($seq, $s->{t})), '200',
		"$s->{tag}: one EXCHANGE in all, since the fault");
	my $seq3 = ch_log_seq();
	is(psql_ok("SELECT state FROM dpwin.recover('$s->{inv}')"), 'completed',
		"$s->{tag}: a second recover() finds it completed");
	is(scalar(grep { $_->{query} =~ /^(EXCHANGE|RENAME|DROP)/ } ch_log_since($seq3)), 0,
		"$s->{tag}: and changes nothing on the server");
	is(psql_ok("SELECT count(*) FROM dpwin.publication WHERE invocation_id = '$s->{inv}' AND outcome = 'published'"),
		1, "$s->{tag}: published once");
}

# --- restarts at each publication step, partitioned targets ------------------------

my %steps = (
	exchange => sub { my ($s) = @_; return ("EXCHANGE TABLES `$db`.`$s->{t}` AND", exchange_re($s->{t})) },
	backup => sub {
		my ($s) = @_;
		my $gen = "$s->{prefix}gen";
		return ("RENAME TABLE `$db`.`$gen` TO", qr/^RENAME TABLE `\Q$db\E`\.`\Q$gen\E` TO/);
	});

my %restarts;
for my $shape ('day', 'month')
{
	for my $step ('exchange', 'backup')
	{
		for my $what ('restart-ch', 'restart-pg')
		{
			my $tag = "${step}_${shape}_" . ($what eq 'restart-ch' ? 'ch' : 'pg');
			my $s = scenario($tag, engine => $shapes{$shape});
			my ($pattern, $re) = $steps{$step}->($s);
			# the restart of ClickHouse loses the held statement's reply
			# (hold_vanish: a network failure at the restart; a server
			# answers it 394, the fault matrix's chr_* cases)
			fault(pattern => $pattern, mode => $what eq 'restart-ch' ? 'hold_vanish' : 'hold', count => 1);
			my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
			ok(wait_running($re, 1, phase => 'holding'), "$s->{tag}: the $step statement is held on the server");
			$restarts{$shape}++;
			sandbox_cmd($what);
			if ($what eq 'restart-ch')
			{
				# The held statement is dropped unrun, its connection closed
				# without an answer.  The EXCHANGE: dpwin
				# sees it has ended (query ids are visible) and exchanges
				# once more.  The RENAME after the exchange: the target is
				# published; dpwin settles the RENAME and sends it again.
				my ($rc, $out, $err) = bg_finish($h);
				hedge("107_restart_ch_$step/$shape", $out eq 'completed' ? 'completed' : 'server_late');
				if ($step eq 'exchange' && $out eq 'completed')
				{
					is(join(',', map { $_->{status} } exchanges(0, $s->{t})), '200',
						"$s->{tag}: the refresh completes, with one more EXCHANGE after the restart");
					check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
				}
				elsif ($step eq 'exchange')
				{
					# The server took longer to come back than dpwin's
					# settling time (about 10 s): nothing proves the
					# EXCHANGE ended, so dpwin stops without another one.
					like($err, qr/08006: .*while settling query dpwin-\Q$s->{inv}\E-exchange-/,
						"$s->{tag}: the refresh completes, or stops unsettled while the server restarts")
					  or diag($err);
					check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
				}
				elsif ($out eq 'completed')
				{
					# The RENAME's reply was lost: dpwin settled it, saw the
					# replaced table still under the generation's name, and
					# renamed it once more.
					is(scalar(grep { $_->{query} =~ $re && $_->{status} eq '200' } ch_log_since(0)), 1,
						"$s->{tag}: the refresh completes, with one more RENAME after the restart");
					check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
					my $backup = psql_ok("SELECT backup_table FROM dpwin.publication WHERE invocation_id = '$s->{inv}'");
					is(uuid_of($backup), $s->{pre_uuid}, "$s->{tag}: the replaced table is the backup");
				}
				else
				{
					# The server came back after dpwin's settling time (a
					# loaded machine): the refresh fails after publishing,
					# naming recover(), which keeps the backup.
					like($err, qr/08006: .*HINT:\s+The invocation is published; .*dpwin\.recover\('\Q$s->{inv}\E'\)/s,
						"$s->{tag}: the refresh completes, or fails after publishing naming recover()") or diag($err);
					check_after_fault($s, which => 'new', state => 'published', outcome => 'published');
				}
				settle_and_check($s, 'recover');
			}
			else
			{
				bg_finish($h);
				ok(wait_until(\&pg_up, 60), "$s->{tag}: PostgreSQL is back");
				my $seq = ch_log_seq();
				# The coordinator died; its statement still waits on the server.
				check_after_fault($s, which => $step eq 'exchange' ? 'old' : 'new',
					state => $step eq 'exchange' ? 'publishing' : 'published',
					outcome => $step eq 'exchange' ? '' : 'published');
				is(release($pattern), 1, "$s->{tag}: released after the restart");
				ok(wait_answered($seq, $re), "$s->{tag}: it has run");
				check_after_fault($s, which => 'new', state => $step eq 'exchange' ? 'publishing' : 'published',
					outcome => $step eq 'exchange' ? '' : 'published');
				my $seq2 = ch_log_seq();
				settle_and_check($s, 'recover');
				is(scalar(exchanges($seq2, $s->{t})), 0, "$s->{tag}: recover() sent no EXCHANGE");
			}
		}
	}
}

note("faulted refreshes: unsettled $unsettled; restarts day " . ($restarts{day} // 0) . ", month " . ($restarts{month} // 0));

crash_teardown();
psql_ok("DROP SERVER $slow CASCADE");
done_testing();
