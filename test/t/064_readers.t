# Readers never see a gap or a mix (docs/guide.md, "Refreshing a window").
#
# A reader process asks ClickHouse, as fast as it can over one kept-alive
# connection, for a summary of the whole target: its row count and the sum
# of a 64-bit hash of every row (a multiset fingerprint computed by
# ClickHouse, independent of dpwin's digests).  Meanwhile the target is
# published several times -- unpartitioned (the generation is copied) and
# partitioned by day (partitions outside the window are cloned) -- and once
# by recover() after a publication left unsettled.  Every generation is
# checked row for row against the source, and its summary recorded.  Every
# answer the reader got must be the summary of one generation (an error
# such as a missing table is a gap, anything else a mix), and the answers
# must go through the generations in order, each of them seen.
use strict;
use warnings;
use Test::More;
use DpwinTest;
use DpwinFixture qw(fault fresh_fixture drop_fixture create_event_source ch_rows after_refresh new_uuid route_id
  refresh_row_sql multiset_is exchanges);
use File::Temp qw(tempfile);
use HTTP::Tiny;
use MIME::Base64 qw(encode_base64);
use POSIX ();

my $db = "t064_$$";
my $E = '2026-09-09 00:00:00+00';

# One query, one answer: the target's count and multiset fingerprint.
sub summary_sql
{
	my ($t) = @_;
	return "SELECT count(), sum(cityHash64(concat(toString(id), '|',"
	  . " ifNull(toString(toUnixTimestamp64Micro(w)), 'NULL'), '|', ifNull(v, 'NULL'))))"
	  . " FROM `$db`.`$t` FORMAT TabSeparated";
}

sub summary
{
	my ($t) = @_;
	my $s = ch_ok(summary_sql($t));
	chomp $s;
	return $s;
}

# The reader: a child process sending summary_sql($t) in a loop until
# SIGTERM; each answer is a line "status<TAB>body" in its file.
sub start_reader
{
	my ($t) = @_;
	my (undef, $file) = tempfile(UNLINK => 1);
	my $sql = summary_sql($t);
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		my $stop = 0;
		local $SIG{TERM} = sub { $stop = 1 };
		my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 60);
		my %headers = (Authorization => 'Basic ' . encode_base64("$ENV{DPWIN_CH_USER}:$ENV{DPWIN_CH_PASSWORD}", ''));
		open my $out, '>', $file or POSIX::_exit(2);
		my $n = 0;
		# GET, the query in the URL: one write per request (a POST's body
		# would follow its headers in a second one, and wait for an ACK).
		my $url = "$ENV{DPWIN_CH_URL}/?query=" . DpwinTest::uri_escape($sql) . "&query_id=reader-$$-";
		while (!$stop)
		{
			my $r = $http->get($url . $n++, { headers => \%headers });
			(my $body = $r->{content} // '') =~ s/\n+\z//;
			$body =~ s/[\r\n]+/ /g;
			print $out "$r->{status}\t$body\n";
		}
		close $out;
		POSIX::_exit(0);
	}
	return { pid => $pid, file => $file, t => $t };
}

sub stop_reader
{
	my ($r) = @_;
	kill 'TERM', $r->{pid};
	waitpid($r->{pid}, 0);
	open my $fh, '<', $r->{file} or die "$r->{file}: $!";
	my @answers = map { chomp; [ split /\t/, $_, 2 ] } <$fh>;
	close $fh;
	return @answers;
}

# Wait until the reader has answers (it is reading before anything starts).
sub reader_going
{
	my ($r) = @_;
	return wait_until(sub { -s $r->{file} }, 30);
}

# Check the reader's answers against the generations' summaries, in order.
sub check_answers
{
	my ($label, $gens, @answers) = @_;
	my %index;
	$index{ $gens->[$_] } //= $_ for 0 .. $#$gens;
	my ($bad, $back, $last) = (0, 0, 0);
	my %seen;
	for my $a (@answers)
	{
		my ($status, $body) = @$a;
		my $k = $status eq '200' ? $index{$body} : undef;
		unless (defined $k)
		{
			diag("$label: answer $status: $body") if $bad++ < 3;
			next;
		}
		$back++ if $k < $last;
		$last = $k;
		$seen{$k}++;
	}
	is($bad, 0, "$label: every one of " . scalar(@answers) . " answers was exactly one generation (no gap, no mix)");
	is($back, 0, "$label: the answers went through the generations in order");
	is_deeply([ sort { $a <=> $b } keys %seen ], [ 0 .. $#$gens ], "$label: every generation was seen")
	  or diag(explain \%seen);
}

# Reads arrived both before and after each EXCHANGE of $t since $seq.
sub check_overlap
{
	my ($label, $seq, $t) = @_;
	my @log = ch_log_since($seq);
	my @reads = map { $_->{ms} } grep { $_->{query_id} =~ /^reader-/ } @log;
	my @x = grep { $_->{status} eq '200' } exchanges($seq, $t);
	my $around = 0;
	for my $x (@x)
	{
		$around++ if (grep { $_ <= $x->{ms} } @reads) && (grep { $_ >= $x->{ms} } @reads);
	}
	is($around, scalar(@x), "$label: the reader was reading across each of the " . scalar(@x) . " EXCHANGEs");
	my $near = grep { my $r = $_; grep { abs($r - $_->{ms}) <= 20 } @x } @reads;
	note("$label: " . scalar(@reads) . " reads, $near of them within 20 ms of an EXCHANGE");
}

ch_control('POST', '/faults/clear');
fresh_fixture($db, $db);
create_event_source();

my $initial = "(1, '2026-09-01 00:00:00', 'before'), (1, '2026-09-01 00:00:00', 'before'),"
  . " (2, '2026-09-08 10:00:00', 'old in window'), (2, '2026-09-08 11:00:00', 'old in window'),"
  . " (3, '2026-09-20 00:00:00', 'after'), (4, NULL, 'null'), (4, NULL, 'null')";

for my $case ([ 'unpartitioned', 'ORDER BY id' ],
	[ 'partitioned by day', 'PARTITION BY toYYYYMMDD(w) ORDER BY id SETTINGS allow_nullable_key = 1' ])
{
	my ($label, $engine) = @$case;
	(my $t = "tgt_$label") =~ s/\W+/_/g;
	ch_ok("CREATE TABLE `$db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
		  . " ENGINE = MergeTree $engine");
	ch_ok("INSERT INTO `$db`.`$t` VALUES $initial");
	ch_ok("INSERT INTO `$db`.`$t` VALUES (5, '2026-09-02 00:00:00', 'a second part')");
	my $route = unique_name("${db}_r");
	psql_ok("SELECT dpwin.create_route('$route', '$db.src'::regclass, 'w', 'sandbox_ch', '$db', '$t',"
		  . " interval '1 day', interval '6 hours', parallelism => 2)");

	my @gens = (summary($t));
	my $rows = ch_rows($t);
	my $seq = ch_log_seq();
	my $reader = start_reader($t);
	ok(reader_going($reader), "$label: the reader is reading");

	# Three publications of the window, the source changing in between.
	for my $k (1 .. 3)
	{
		psql_ok("UPDATE $db.src SET v = v || ' $k' WHERE id % 3 = $k - 1");
		like(psql_ok(refresh_row_sql($route, $E)), qr/\|completed\|/, "$label: publication $k completes");
		my $exp = after_refresh($rows, $E);
		multiset_is(ch_rows($t), $exp, "$label: generation $k is the kept rows plus the source window");
		$rows = $exp;
		push @gens, summary($t);
	}

	# A publication left unsettled (the EXCHANGE fails, so does reading the
	# UUIDs back), then settled by recover(), which runs the EXCHANGE.
	psql_ok("UPDATE $db.src SET v = v || ' 4' WHERE id % 2 = 0");
	my $inv = new_uuid();
	fault(pattern => "EXCHANGE TABLES `$db`.`$t` AND", mode => 'error', code => 241, count => 1);
	fault(pattern => "SELECT name, toString(uuid) FROM system.tables WHERE database = '$db' AND name IN ('$t', ",
		mode => 'error', code => 241, count => 1);
	psql(refresh_row_sql($route, $E, $inv));
	is(psql_ok("SELECT state FROM dpwin.invocations WHERE invocation_id = '$inv'"), 'publishing',
		"$label: a publication is left unsettled");
	is(summary($t), $gens[-1], "$label: ... and the target is still the last generation");
	is(psql_ok("SELECT state FROM dpwin.recover('$inv')"), 'completed', "$label: recover() publishes it");
	my $exp = after_refresh($rows, $E);
	multiset_is(ch_rows($t), $exp, "$label: generation 4 (by recover) is the kept rows plus the source window");
	push @gens, summary($t);

	my @answers = stop_reader($reader);
	is(scalar(keys %{ { map { $_ => 1 } @gens } }), scalar(@gens), "$label: the five generations differ");
	check_answers($label, \@gens, @answers);
	check_overlap($label, $seq, $t);
	ok((grep { $_->{query} =~ /ATTACH PARTITION ID '[^']*' FROM `\Q$db\E`\.`\Q$t\E`/ } ch_log_since($seq)),
		"$label: partitions outside the window were cloned into the generations")
	  if $engine =~ /PARTITION BY/;
	psql_ok("SELECT dpwin.drop_route('$route')");
}

drop_fixture();
done_testing();
