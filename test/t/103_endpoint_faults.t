# The crash matrix, part 4: the ClickHouse endpoint misbehaving, run twice:
# with the endpoint running statements under the client's query_id, as a
# server does (visible), and under ids of its own, as behind a proxy that
# drops them (hidden; docs/endpoint.md, "Query ids").  Slow statements are
# holds (mode=hold): they run in the engine until the test releases them,
# or until a KILL QUERY stops them, so nothing here races a timer.
#   refused       every connection refused when the refresh starts;
#   restart_xtr   the endpoint restarts while staging INSERTs run (data
#                 persists): the interrupted chunks are fenced and retried;
#   away_xtr      the same, the endpoint staying away longer than dpwin's
#                 settling deadline: the fence of each interrupted attempt is
#                 tried again after the backoff, and the refresh completes
#                 once the endpoint is back;
#   bak_unrun, bak_ran  the RENAME that keeps the replaced table as the
#                 backup loses its reply, dropped unrun or after it ran: dpwin
#                 settles it, reads the name's UUID and renames once more only
#                 if the first did not;
#   restart_pub   the endpoint restarts while the EXCHANGE waits on it, so
#                 the EXCHANGE never runs, and its connection closes without
#                 an answer (mode=hold_vanish: a network failure at the
#                 restart; a server answers it 394, the fault matrix's
#                 chr_publishing).  Visible: dpwin sees it has ended and
#                 exchanges once more.  Hidden: it cannot, and leaves the
#                 invocation publishing for recover();
#   ins_timeout   a staging INSERT outlives the server's request_timeout: the
#                 attempt is fenced (visible: the INSERT is killed; hidden:
#                 it runs later and finds its table gone) and the chunk is
#                 retried into a new table;
#   create_timeout  the same for the CREATE of a staging table, which dpwin
#                 does not settle: it runs after the refresh completed, and
#                 recover() drops its table;
#   x_late        the EXCHANGE outlives request_timeout.  Visible: dpwin kills
#                 it and exchanges once more.  Hidden: it must not exchange
#                 again while the first may still run; the invocation stays
#                 publishing, and recover() settles it once it has run;
#   x_never       hidden: the timed-out EXCHANGE never runs, recover()
#                 exchanges once.  Visible: the second EXCHANGE times out as
#                 well; both are killed and the invocation fails unpublished;
#   x_rec_late    recover()'s own EXCHANGE times out.  Hidden: it runs later,
#                 a second recover() finishes the publication.  Visible (the
#                 coordinator died in a PostgreSQL restart first): recover()
#                 kills it and the invocation fails unpublished.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault bg_psql bg_finish exchange_re exchanges uuid_of);
use DpwinCrash;
use DpwinEndpoint qw(both_modes release running wait_running log_entries only_held_timed_out hedge);

my $db = "t103_$$";

# The checks (a) to (e) after each fault: test/lib/DpwinCrash.pm.
crash_setup($db);

# A foreign server for the same endpoint with a request timeout that only
# a held statement reaches: the machine may be slow (CI runs majors side by
# side on two cores), and a statement that timed out without being held
# would change the outcomes asserted below.  only_held_timed_out() checks
# that no other statement did.
my $slow = "${db}_slow";
psql_ok("CREATE SERVER $slow FOREIGN DATA WRAPPER dpwin_clickhouse"
	  . " OPTIONS (url '$ENV{DPWIN_CH_URL}', request_timeout '5s');
	CREATE USER MAPPING FOR CURRENT_USER SERVER $slow
	  OPTIONS (user '$ENV{DPWIN_CH_REFRESH_USER}', password '$ENV{DPWIN_CH_PASSWORD}');");

# The PostgreSQL server log; pg_log_since($start) reads it from byte $start on.
my $pg_log = sandbox_root() . '/run/postgresql.log';

sub pg_log_since
{
	my ($start) = @_;
	open my $fh, '<', $pg_log or die "cannot read $pg_log: $!";
	seek($fh, $start, 0);
	local $/;
	return scalar <$fh> // '';
}

sub hold_exchange
{
	my ($s, $count) = @_;
	fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold', count => $count // 1);
}

sub wait_exchange_held
{
	my ($s, $n) = @_;
	return wait_running(exchange_re($s->{t}), $n // 1, phase => 'holding');
}


# The statuses of the EXCHANGEs of $s in the log since $seq, in order.
sub exchange_statuses
{
	my ($s, $seq) = @_;
	return join(',', map { $_->{status} } exchanges($seq, $s->{t}));
}

both_modes(sub {
	my ($mode) = @_;
	my $m = substr($mode, 0, 1);

	# --- connection refused at start ----------------------------------------------

	{
		my $s = scenario("refused_$m");
		fault(mode => 'refuse', count => 1000);
		my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
		ch_control('POST', '/faults/clear');
		like($err, qr/^08006: lost the connection to ClickHouse server /,
			"$s->{tag}: the refresh fails with a lost connection (the server closes it at once)") or diag($err);
		check_after_fault($s, which => 'old', state => 'failed', outcome => '');
		settle_and_check($s, 'failed');
	}

	# --- the endpoint restarts during extraction --------------------------------------

	{
		my $s = scenario("restart_xtr_$m");
		my $stg = qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/;
		fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'hold', count => 2);
		# The interrupted chunks are retried after dpwin.retry_backoff and
		# twice that: the default (0.5 s and 1 s) is shorter than the
		# endpoint's restart on a loaded machine, so the retries could run
		# out before it is back.  10 s and 20 s outlast any restart.
		my $h = do
		{
			local $ENV{PGOPTIONS} = '-c dpwin.retry_backoff=10s';
			bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
		};
		ok(wait_running($stg, 2, phase => 'holding'), "$s->{tag}: two staging INSERTs are held on the server");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		is(psql_ok("SELECT string_agg(attempt::text, ',' ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}'"),
			'1,1,0,0', "$s->{tag}: the two interrupted chunks were loaded again, into new staging tables");
		settle_and_check($s, 'recover');
	}

	# --- the endpoint stays away longer than one settling deadline -----------------------

	if ($mode eq 'visible')
	{
		my $s = scenario("away_xtr_$m");
		fault(pattern => "INSERT INTO `$db`.`$s->{prefix}stg_", mode => 'hold', count => 2);
		my $log_start = -s $pg_log;
		my $h = do
		{
			local $ENV{PGOPTIONS} = '-c dpwin.retry_backoff=2s';
			bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
		};
		ok(wait_running(qr/^INSERT INTO `\Q$db\E`\.`\Q$s->{prefix}\Estg_/, 2, phase => 'holding'),
			"$s->{tag}: two staging INSERTs are held on the server");
		sandbox_cmd('stop-ch');
		# The settling of an interrupted INSERT gives up after its deadline
		# while the server is away; the fence is then tried again after the
		# attempt's backoff instead of ending the refresh.
		ok(wait_until(sub { pg_log_since($log_start) =~ /could not fence attempt 0 of chunk \d+, trying again/ }, 90),
			"$s->{tag}: a fence that could not reach the server is tried again");
		sandbox_cmd('start-ch');
		my ($rc, $out, $err) = bg_finish($h);
		is($out, 'completed', "$s->{tag}: the refresh completes once the server is back") or diag($err);
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		is(psql_ok("SELECT string_agg(attempt::text, ',' ORDER BY chunk_no) FROM dpwin.chunk WHERE invocation_id = '$s->{inv}'"),
			'1,1,0,0', "$s->{tag}: the two interrupted chunks were loaded again, into new staging tables");
		settle_and_check($s, 'recover');
	}

	# --- the RENAME that keeps the backup gets no answer ----------------------------------

	for my $f ([ 'unrun', mode => 'idle_close', ms => 0 ], [ 'ran', mode => 'lost' ])
	{
		my ($how, %fault) = @$f;
		my $s = scenario("bak_${how}_$m");
		my $rename = "RENAME TABLE `$db`.`$s->{prefix}gen` TO";
		my $seq = ch_log_seq();
		my $log_start = -s $pg_log;
		fault(pattern => $rename, count => 1, %fault);
		is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed',
			"$s->{tag}: the refresh completes");
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		my @renames = grep { index($_->{query}, $rename) == 0 } ch_log_since($seq);
		is(join(',', map { $_->{status} } @renames), $how eq 'unrun' ? 'idle-closed,200' : 'lost',
			"$s->{tag}: " . ($how eq 'unrun' ? 'the RENAME dropped unrun is sent again once the server shows it never ran'
				: 'the RENAME that ran is not sent again'));
		ok(wait_until(sub { pg_log_since($log_start) =~ /\Q$s->{inv}\E: the RENAME to the backup failed \((?:reply lost|connection failed)\), trying again/ }, 30),
			"$s->{tag}: the server log says why the RENAME was settled and tried again");
		my $backup = psql_ok("SELECT backup_table FROM dpwin.publication WHERE invocation_id = '$s->{inv}'");
		is(uuid_of($backup), $s->{pre_uuid}, "$s->{tag}: the replaced table is the backup");
		settle_and_check($s, 'recover');
	}

	# --- the endpoint restarts during publication ----------------------------------------

	{
		my $s = scenario("restart_pub_$m");
		fault(pattern => "EXCHANGE TABLES `$db`.`$s->{t}` AND", mode => 'hold_vanish', count => 1);
		my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
		ok(wait_exchange_held($s), "$s->{tag}: the EXCHANGE is held on the server");
		sandbox_cmd('restart-ch');
		my ($rc, $out, $err) = bg_finish($h);
		# A server that takes longer to come back than dpwin's settling time
		# (about 10 s; a loaded machine) leaves nothing that proves the
		# EXCHANGE ended: dpwin stops there, without another EXCHANGE, as
		# in the hidden mode.
		my $unsettled = $out ne 'completed' && $err =~ /08006: .*while settling query dpwin-\Q$s->{inv}\E-exchange-/;
		hedge("103_restart_pub/$mode", $unsettled ? 'server_late' : 'settled');
		if ($mode eq 'visible' && !$unsettled)
		{
			# The log restarted with the endpoint: it holds what came after.
			is($out, 'completed', "$s->{tag}: the refresh completes") or diag($err);
			is(exchange_statuses($s, 0), '200', "$s->{tag}: dpwin exchanged once more, after the restart");
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			like($err, $unsettled ? qr/08006: / : qr/HINT:.*dpwin\.recover\('\Q$s->{inv}\E'\)/,
				"$s->{tag}: the refresh fails, naming recover() (or stops unsettled)") or diag($err);
			check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
			my $seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(exchange_statuses($s, $seq), '200', "$s->{tag}: recover exchanged once");
		}
	}

	# --- a staging INSERT times out -------------------------------------------------------

	{
		my $s = scenario("ins_timeout_$m", server => $slow);
		my $seq = ch_log_seq();
		my $stg = "$s->{prefix}stg_0_0";
		my $re = qr/^INSERT INTO `\Q$db\E`\.`\Q$stg\E`/;
		fault(pattern => "INSERT INTO `$db`.`$stg`", mode => 'hold', count => 1);
		is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', "$s->{tag}: the refresh completes");
		if ($mode eq 'visible')
		{
			is(release($stg), 0, "$s->{tag}: the timed-out INSERT is not held any more");
			is((grep { $_->{query} =~ $re } log_entries($seq))[0]{status}, '500',
				"$s->{tag}: dpwin killed it before retrying the chunk");
		}
		else
		{
			is(release($stg), 1, "$s->{tag}: the timed-out INSERT is still held when the refresh completed");
			ok(wait_answered($seq, $re), "$s->{tag}: released, it has ended");
			is((grep { $_->{query} =~ $re } log_entries($seq))[0]{status}, '404',
				"$s->{tag}: it found its attempt's staging table gone");
		}
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
			"$s->{tag}: chunk 0 was loaded by its second attempt");
		only_held_timed_out($s, $seq, $re);
		settle_and_check($s, 'recover');
	}

	# --- a staging CREATE times out -------------------------------------------------------

	{
		my $s = scenario("create_timeout_$m", server => $slow);
		my $seq = ch_log_seq();
		my $stg = "$s->{prefix}stg_0_0";
		my $re = qr/^CREATE TABLE `\Q$db\E`\.`\Q$stg\E`/;
		fault(pattern => "CREATE TABLE `$db`.`$stg`", mode => 'hold', count => 1);
		is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', "$s->{tag}: the refresh completes");
		is(psql_ok("SELECT attempt FROM dpwin.chunk WHERE invocation_id = '$s->{inv}' AND chunk_no = 0"), 1,
			"$s->{tag}: chunk 0 was loaded by its second attempt");
		# Both ways: dpwin does not settle the CREATE (only the INSERT) before
		# the retry, so it runs once released, after the refresh completed.
		is(release($stg), 1, "$s->{tag}: the timed-out CREATE is still held when the refresh completed");
		ok(wait_answered($seq, $re), "$s->{tag}: released, it has run");
		is_deeply(leftovers(), [$stg], "$s->{tag}: and left its table behind");
		only_held_timed_out($s, $seq, $re);
		check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
		settle_and_check($s, 'recover');
	}

	# --- the EXCHANGE times out --------------------------------------------------------------

	{
		my $s = scenario("x_late_$m", server => $slow);
		my $seq = ch_log_seq();
		hold_exchange($s);
		if ($mode eq 'visible')
		{
			is(psql_ok(refresh_sql($s->{route}, $E2, $s->{inv})), 'completed', "$s->{tag}: the refresh completes");
			is(exchange_statuses($s, $seq), '500,200',
				"$s->{tag}: the timed-out EXCHANGE was killed, and the one more EXCHANGE ran");
			only_held_timed_out($s, $seq, exchange_re($s->{t}));
			check_after_fault($s, which => 'new', state => 'completed', outcome => 'published');
			settle_and_check($s, 'recover');
		}
		else
		{
			my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
			like($err, qr/^08006: .*EXCHANGE/, "$s->{tag}: the refresh fails: the EXCHANGE got no answer") or diag($err);
			is(exchange_statuses($s, $seq), '',
				"$s->{tag}: no second EXCHANGE was sent while the first may still run");
			is(release("EXCHANGE TABLES `$db`.`$s->{t}`"), 1, "$s->{tag}: the first is still held");
			ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: released, the timed-out EXCHANGE has run");
			check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
			$seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(exchange_statuses($s, $seq), '', "$s->{tag}: recover sent no EXCHANGE");
		}
	}

	{
		my $s = scenario("x_never_$m", server => $slow);
		my $seq = ch_log_seq();
		hold_exchange($s, $mode eq 'visible' ? 2 : 1);
		my $err = psql_err(refresh_sql($s->{route}, $E2, $s->{inv}));
		like($err, $mode eq 'visible' ? qr/^08006: .*did not answer in time while exchanging the target/
			: qr/^08006: .*EXCHANGE/, "$s->{tag}: the refresh fails: the EXCHANGE got no answer") or diag($err);
		if ($mode eq 'visible')
		{
			is(exchange_statuses($s, $seq), '500,500', "$s->{tag}: both EXCHANGEs were killed, neither ran");
			only_held_timed_out($s, $seq, exchange_re($s->{t}));
			check_after_fault($s, which => 'old', state => 'failed', outcome => 'not_published');
			settle_and_check($s, 'failed');
		}
		else
		{
			# The endpoint still holds the EXCHANGE: a restart cancels it unrun.
			sandbox_cmd('restart-ch');
			check_after_fault($s, which => 'old', state => 'publishing', outcome => '');
			$seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(exchange_statuses($s, $seq), '200', "$s->{tag}: recover exchanged once");
		}
	}

	# --- recover()'s own EXCHANGE times out ---------------------------------------------------

	{
		my $s = scenario("x_rec_late_$m", server => $slow);
		hold_exchange($s);
		if ($mode eq 'visible')
		{
			# Only a coordinator that died leaves the invocation publishing
			# here: a timed-out EXCHANGE is killed and retried at once.
			my $h = bg_psql(refresh_sql($s->{route}, $E2, $s->{inv}));
			ok(wait_exchange_held($s), "$s->{tag}: the EXCHANGE is held on the server");
			sandbox_cmd('restart-pg');
			bg_finish($h);
			ok(wait_until(\&pg_up, 60), "$s->{tag}: PostgreSQL is back");
		}
		else
		{
			like(psql_err(refresh_sql($s->{route}, $E2, $s->{inv})), qr/^08006: .*EXCHANGE/,
				"$s->{tag}: the refresh fails: the EXCHANGE got no answer");
		}
		sandbox_cmd('restart-ch');
		my $seq = ch_log_seq();
		hold_exchange($s);
		my $err = psql_err("SELECT * FROM dpwin.recover('$s->{inv}')");
		like($err, qr/^08006: .*EXCHANGE|^08006: .*retrying the exchange/,
			"$s->{tag}: recover retries, and its EXCHANGE gets no answer either") or diag($err);
		if ($mode eq 'visible')
		{
			is(exchange_statuses($s, $seq), '500', "$s->{tag}: recover killed its EXCHANGE, which never ran");
			check_after_fault($s, which => 'old', state => 'failed', outcome => 'not_published');
			settle_and_check($s, 'failed');
		}
		else
		{
			is(exchange_statuses($s, $seq), '', "$s->{tag}: recover did not exchange again");
			is(release("EXCHANGE TABLES `$db`.`$s->{t}`"), 1, "$s->{tag}: its EXCHANGE is still held");
			ok(wait_answered($seq, exchange_re($s->{t})), "$s->{tag}: released, its EXCHANGE has run");
			check_after_fault($s, which => 'new', state => 'publishing', outcome => '');
			$seq = ch_log_seq();
			settle_and_check($s, 'recover');
			is(exchange_statuses($s, $seq), '', "$s->{tag}: the second recover sent no EXCHANGE");
		}
	}
});

crash_teardown();
psql_ok("DROP SERVER $slow CASCADE");
done_testing();
