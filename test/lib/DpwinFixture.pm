package DpwinFixture;

# Fixtures and comparisons shared by the TAP suite (test/t/*.t), on top of
# DpwinTest's psql/ch helpers: SQL quoting, multiset comparison of rows,
# endpoint faults, a test file's own ClickHouse database and PostgreSQL
# schema, the (id, w, v) event tables and routes of the publication,
# recovery and crash tests, invocation table names, waits on the query
# log, background psql sessions and sessions holding locks, the source
# barrier that holds chunk workers inside a chunk, and the cluster's
# processes as /proc shows them.
#
# Nothing is exported by default: a test names what it uses, so that its
# own helpers of the same name (070_partitioned.t keeps its own) do not
# clash.

use strict;
use warnings;
use Exporter 'import';
use IPC::Run qw(start finish timeout);
use Test::More;
use DpwinTest;
# wait_logged is the endpoint module's; it is exported from here too, for
# the tests that name it with this module's helpers.
use DpwinEndpoint qw(wait_logged);

our @EXPORT_OK = qw(
  pg_literal pg_ident ch_literal ch_ident
  psql_ok_long sorted_lines multiset_diff multiset_is multiset_rows_compared
  fault
  fresh_fixture drop_fixture drop_routes drop_roles
  pg_row_sql ch_row_sql
  create_event_table event_route ch_event_row_sql pg_event_row_sql ch_rows pg_rows uuid_of replace_by_copy
  micros kept after_refresh
  new_uuid route_id invocation_prefix own_tables dpwin_tables_left
  exchange_re exchanges
  bg_psql bg_finish postmaster_pid pg_up coordinator_pid
  new_event_route create_event_source refresh_sql refresh_row_sql generation_name invocation_field
  wait_logged hold_session release_session hold_source release_source workers_held
  cluster_processes proc_status_kb waits_for_http pg_log_mark pg_log_since
  backup_tables coordinators_gone
);

# ---- quoting ------------------------------------------------------------

# A PostgreSQL string literal: 'it''s'.
sub pg_literal
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# A PostgreSQL quoted identifier: "Odd ""Name""".
sub pg_ident
{
	my ($s) = @_;
	$s =~ s/"/""/g;
	return qq{"$s"};
}

# ClickHouse quoting, as src/chclient.c does it: backslash escapes.
sub ch_ident
{
	my ($s) = @_;
	$s =~ s/([\\`])/\\$1/g;
	return "`$s`";
}

sub ch_literal
{
	my ($s) = @_;
	$s =~ s/([\\'])/\\$1/g;
	return "'$s'";
}

# ---- rows as multisets --------------------------------------------------

# psql_ok for long statements: a failure message shows only the first 400
# characters of the SQL.
sub psql_ok_long
{
	my ($sql) = @_;
	my ($rc, $out, $err) = psql($sql);
	die "psql failed ($rc): $err\nSQL: " . substr($sql, 0, 400) . "\n" if $rc;
	return $out;
}

# The non-empty lines of a query's output, sorted: one canonical row each.
sub sorted_lines
{
	my ($s) = @_;
	return [ sort grep { length } split /\n/, $s ];
}

# The distinct rows whose counts differ between two lists of rows.
sub multiset_diff
{
	my ($got, $exp) = @_;
	my %d;
	$d{$_}++ for @$got;
	$d{$_}-- for @$exp;
	return grep { $d{$_} } sort keys %d;
}

my $rows_compared = 0;

# One assertion: $got and $exp hold the same rows the same number of times.
# On failure, the first rows that differ, with how many times each is extra
# or missing.
sub multiset_is
{
	my ($got, $exp, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my %d;
	$d{$_}++ for @$got;
	$d{$_}-- for @$exp;
	my @extra = grep { $d{$_} > 0 } sort keys %d;
	my @missing = grep { $d{$_} < 0 } sort keys %d;
	$rows_compared += @$got;
	my $ok = ok(!@extra && !@missing && @$got == @$exp, $name);
	unless ($ok)
	{
		diag(sprintf("got %d rows, expected %d; %d distinct extra, %d distinct missing",
				scalar(@$got), scalar(@$exp), scalar(@extra), scalar(@missing)));
		diag("extra ($d{$_}x): " . substr($_, 0, 300)) for @extra[ 0 .. ($#extra < 2 ? $#extra : 2) ];
		diag("missing (" . -$d{$_} . "x): " . substr($_, 0, 300)) for @missing[ 0 .. ($#missing < 2 ? $#missing : 2) ];
	}
	return $ok;
}

# How many rows multiset_is() has compared so far (for a closing note).
sub multiset_rows_compared { return $rows_compared; }

# ---- endpoint faults -----------------------------------------------------

# Register a fault on the endpoint's control port (docs/endpoint.md), e.g.
# fault(pattern => "INSERT INTO `d`.`t`", mode => 'delay', ms => 3000,
# count => 1); values are URL-encoded here.  Dies unless it is registered.
sub fault
{
	my (%f) = @_;
	my $r = ch_control('POST',
		'/fault?' . join('&', map { "$_=" . DpwinTest::uri_escape($f{$_}) } sort keys %f));
	die "fault not registered: $r" unless $r =~ /^Ok/;
	return $r;
}

# ---- the test file's database and schema ---------------------------------

my ($fx_db, $fx_schema);

# (Re)create the test file's ClickHouse database (Atomic) and PostgreSQL
# schema, both empty, and make them the ones the helpers below read.
sub fresh_fixture
{
	my ($db, $schema) = @_;
	($fx_db, $fx_schema) = ($db, $schema);
	ch_ok("DROP DATABASE IF EXISTS `$db`");
	ch_ok("CREATE DATABASE `$db` ENGINE = Atomic");
	psql_ok("DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema;") if defined $schema;
}

# Drop them at the end of the test, with the routes new_event_route() made.
my @fx_routes;

sub drop_fixture
{
	drop_routes(@fx_routes);
	@fx_routes = ();
	psql_ok("DROP SCHEMA $fx_schema CASCADE") if defined $fx_schema;
	ch_ok("DROP DATABASE `$fx_db`");
}

sub drop_routes
{
	my (@routes) = @_;
	return unless @routes;
	psql_ok("SELECT dpwin.drop_route(r) FROM unnest(ARRAY[" . join(', ', map { pg_literal($_) } @routes)
		  . "]::text[]) r");
}

# Drop the roles that exist, with their routes and everything they own.
sub drop_roles
{
	my (@roles) = @_;
	for my $r (@roles)
	{
		next unless psql_ok("SELECT count(*) FROM pg_roles WHERE rolname = " . pg_literal($r));
		psql_ok("SELECT dpwin.drop_route(route_name) FROM dpwin.routes WHERE owner = " . pg_literal($r));
		psql_ok("DROP OWNED BY $r; DROP ROLE $r");
	}
}

# ---- (id, w, v, n) tables of the extraction tests -------------------------

# One row as text that PostgreSQL and ClickHouse render alike: id, w in
# Unix microseconds, v as UTF-8 hex, n without trailing zeros; N for NULL.
sub pg_row_sql
{
	return "id::text || '|' || COALESCE((extract(epoch FROM w) * 1000000)::bigint::text, 'N') || '|'"
	  . " || COALESCE(encode(convert_to(v, 'UTF8'), 'hex'), 'N') || '|' || COALESCE(trim_scale(n)::text, 'N')";
}

sub ch_row_sql
{
	return "toString(id) || '|' || if(isNull(w), 'N', toString(toUnixTimestamp64Micro(assumeNotNull(w)))) || '|'"
	  . " || if(isNull(v), 'N', lower(hex(assumeNotNull(v)))) || '|' || if(isNull(n), 'N', toString(assumeNotNull(n)))";
}

# ---- (id, w, v) event tables of the publication, recovery and crash tests --

# Create the ClickHouse event table `db`.`$t`, with rows if $values (an SQL
# VALUES list) is given.
sub create_event_table
{
	my ($t, $values) = @_;
	ch_ok("CREATE TABLE `$fx_db`.`$t` (id Int64, w Nullable(DateTime64(6, 'UTC')), v Nullable(String))"
		  . " ENGINE = MergeTree ORDER BY id");
	ch_ok("INSERT INTO `$fx_db`.`$t` VALUES $values") if defined $values;
}

# A fresh event table $t with rows before (09-01), inside (09-08) and
# after (09-20) the window ending 2026-09-09, NULL windows and duplicates,
# and route $route to it from schema.src: one-day windows, 6-hour chunks,
# two workers.  Options: server (default sandbox_ch), evidence (function).
# Returns $t.
sub event_route
{
	my ($route, $t, %opt) = @_;
	create_event_table($t, "(1, '2026-09-01 00:00:00', 'before'), (1, '2026-09-01 00:00:00', 'before'),"
		  . " (2, '2026-09-08 10:00:00', 'old in window'), (3, '2026-09-20 00:00:00', 'after'),"
		  . " (4, NULL, 'null'), (4, NULL, 'null')");
	my $server = $opt{server} // 'sandbox_ch';
	my $ev = $opt{evidence} ? ", evidence_function => '$opt{evidence}'" : '';
	psql_ok("SELECT dpwin.create_route('$route', '$fx_schema.src'::regclass, 'w', '$server', '$fx_db', '$t',"
		  . " interval '1 day', interval '6 hours', parallelism => 2$ev)");
	return $t;
}

# A fresh event table tgt_$tag and a route to it (event_route above) named
# after the fixture and $tag; drop_fixture() drops the route.  Returns
# (route, table).
sub new_event_route
{
	my ($tag, %opt) = @_;
	my $route = unique_name("${fx_db}_$tag");
	push @fx_routes, $route;
	return ($route, event_route($route, "tgt_$tag", %opt));
}

# The source schema.src of the event routes: rows $o{step} apart from
# $o{from} (default 2026-09-08, so through the window ending 09-09), a
# duplicated row, a NULL window and a row at 09-09 (never extracted by that
# window), and an index on w (hold_source() locks it).
sub create_event_source
{
	my (%o) = @_;
	my $from = $o{from} // '2026-09-08 00:00:00+00';
	my $step = $o{step} // '13 minutes 0.25 seconds';
	my $rows = $o{rows} // 100;
	my $mod = $o{mod} // 7;
	psql_ok("CREATE TABLE $fx_schema.src (id bigint NOT NULL, w timestamptz, v text);
		INSERT INTO $fx_schema.src
			SELECT g, timestamptz '$from' + g * interval '$step', 'new ' || (g % $mod)
			FROM generate_series(0, $rows - 1) g;
		INSERT INTO $fx_schema.src VALUES (500, '2026-09-08 12:00:00+00', 'dup'), (500, '2026-09-08 12:00:00+00', 'dup'),
			(501, NULL, 'never extracted'), (502, '2026-09-09 00:00:00+00', 'never extracted');
		CREATE INDEX src_w ON $fx_schema.src (w);");
}

# An event row as the line "id|w as Unix microseconds|v", NULL spelled
# NULL, rendered alike by ClickHouse and by PostgreSQL.
sub ch_event_row_sql
{
	return "concat(toString(id), '|', ifNull(toString(toUnixTimestamp64Micro(w)), 'NULL'), '|', ifNull(v, 'NULL'))";
}

sub pg_event_row_sql
{
	return "id || '|' || coalesce(((extract(epoch FROM w) * 1000000)::bigint)::text, 'NULL') || '|' || coalesce(v, 'NULL')";
}

# The rows of ClickHouse table `db`.`$t`, sorted, one line each: event
# rows (ch_event_row_sql) unless $o{row} gives another rendering (such as
# ch_row_sql()), and only those matching $o{where} if given.
sub ch_rows
{
	my ($t, %o) = @_;
	my $out = ch_ok("SELECT " . ($o{row} // ch_event_row_sql()) . " FROM `$fx_db`.`$t`"
		  . (defined $o{where} ? " WHERE $o{where}" : '') . " FORMAT TSVRaw");
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

# The event rows of PostgreSQL table schema.src WHERE $where, sorted.
sub pg_rows
{
	my ($where) = @_;
	my $out = psql_ok("SELECT " . pg_event_row_sql() . " FROM $fx_schema.src WHERE $where");
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

# The UUID of ClickHouse table `db`.`$t`, undef if there is none.
sub uuid_of
{
	my ($t) = @_;
	my $u = ch_ok("SELECT toString(uuid) FROM system.tables WHERE database = '$fx_db' AND name = '$t'");
	chomp $u;
	return $u eq '' ? undef : $u;
}

# Replace ClickHouse table $t by a copy of itself: the same rows under
# another UUID, as an operator might behind dpwin's back.
sub replace_by_copy
{
	my ($t) = @_;
	my ($q, $c) = ("`$fx_db`.`$t`", "`$fx_db`.`${t}_copy`");
	ch_ok("CREATE TABLE $c AS $q");
	ch_ok("INSERT INTO $c SELECT * FROM $q");
	ch_ok("EXCHANGE TABLES $q AND $c");
	ch_ok("DROP TABLE $c SYNC");
}

# A timestamptz as Unix microseconds.
# The backup tables of route $route in ClickHouse database $db, sorted.
sub backup_tables
{
	my ($db, $route) = @_;
	my $rid = route_id($route);
	return [ sort grep { length } split /\n/, ch_ok("SELECT name FROM system.tables WHERE database = '$db'"
			  . " AND startsWith(name, '_dpwin_backup_${rid}_') FORMAT TSVRaw") ];
}

# Wait until no dpwin coordinator runs (one may outlive its caller to
# drop backups); whether none did within 60 s.
sub coordinators_gone
{
	return wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dpwin coordinator'") == 0 }, 60);
}

sub micros
{
	my ($ts) = @_;
	return psql_ok("SELECT (extract(epoch FROM timestamptz '$ts') * 1000000)::bigint");
}

# The rows (lines as above) outside [lo, hi) microseconds or with a NULL
# window: what a refresh of that window keeps.
sub kept
{
	my ($rows, $lo, $hi) = @_;
	return [ grep { my (undef, $m) = split /\|/; $m eq 'NULL' || $m < $lo || $m >= $hi } @$rows ];
}

# The target expected after refreshing the one-day window ending at $e over
# $rows: the kept rows plus the source's window.
sub after_refresh
{
	my ($rows, $e) = @_;
	my $hi = micros($e);
	return [ sort(@{ kept($rows, $hi - 86_400_000_000, $hi) },
			@{ pg_rows("w >= timestamptz '$e' - interval '1 day' AND w < '$e'") }) ];
}

# ---- invocations and their tables ------------------------------------------

sub new_uuid { return psql_ok('SELECT gen_random_uuid()'); }

# The refresh of $route's window ending at $end (as invocation $inv if
# given), returning the columns $cols of dpwin_refresh (default state).
sub refresh_sql
{
	my ($route, $end, $inv, $cols) = @_;
	return "SELECT " . ($cols // 'state') . " FROM dpwin_refresh('$route', '$end'" . ($inv ? ", '$inv'" : '') . ")";
}

# The same returning invocation_id|state|final_rows|backup_table.
sub refresh_row_sql
{
	my ($route, $end, $inv) = @_;
	return refresh_sql($route, $end, $inv, 'invocation_id, state, final_rows, backup_table');
}

# One expression over dpwin.invocations for invocation $inv.
sub invocation_field
{
	my ($inv, $expr) = @_;
	return psql_ok("SELECT $expr FROM dpwin.invocations WHERE invocation_id = '$inv'");
}

sub route_id
{
	my ($route) = @_;
	return psql_ok("SELECT route_id FROM dpwin.route WHERE route_name = '$route'");
}

# The name prefix of an invocation's staging and generation tables:
# _dpwin_<route id>_<first 12 hex digits of the invocation>_, the rule of
# src/names.c (062_recovery.t and every chaos trial compare it with the
# names the journal records).
sub invocation_prefix
{
	my ($route_id, $inv) = @_;
	(my $hex = $inv) =~ s/-//g;
	return "_dpwin_${route_id}_" . substr($hex, 0, 12) . '_';
}

# The invocation's staging and generation tables that still exist.
sub generation_name
{
	my ($route, $inv) = @_;
	return invocation_prefix(route_id($route), $inv) . 'gen';
}

sub own_tables
{
	my ($route, $inv) = @_;
	my $prefix = invocation_prefix(route_id($route), $inv);
	return [ sort grep { $_ ne '' } split /\n/,
		  ch_ok("SELECT name FROM system.tables WHERE database = '$fx_db' AND startsWith(name, '$prefix') FORMAT TSVRaw") ];
}

# How many dpwin tables other than backups (staging, generation, probe)
# are in the database.
sub dpwin_tables_left
{
	my $n = ch_ok("SELECT count() FROM system.tables WHERE database = '$fx_db' AND startsWith(name, '_dpwin_')"
		  . " AND NOT startsWith(name, '_dpwin_backup_')");
	chomp $n;
	return $n;
}

# EXCHANGE statements on `db`.`$t`: the pattern, and those in the query log
# since $seq.
sub exchange_re
{
	my ($t) = @_;
	return qr/^EXCHANGE TABLES `\Q$fx_db\E`\.`\Q$t\E` AND/;
}

sub exchanges
{
	my ($seq, $t) = @_;
	my $re = exchange_re($t);
	return grep { $_->{query} =~ $re } ch_log_since($seq);
}

# ---- sessions and processes ------------------------------------------------

# A background psql running $sql (errors verbose, with their SQLSTATE),
# application_name $app (so that it can be found) or dpwin_test_bg.
sub bg_psql
{
	my ($sql, $app) = @_;
	my %h = (out => '', err => '');
	local $ENV{PGAPPNAME} = $app // 'dpwin_test_bg';
	$h{run} = start([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', '-c', $sql ],
		'>', \$h{out}, '2>', \$h{err}, timeout(120));
	return \%h;
}

# Wait for it to end: (exit code, output, errors).
sub bg_finish
{
	my ($h) = @_;
	eval { finish($h->{run}) };
	chomp $h->{out};
	return ($? >> 8, $h->{out}, $h->{err});
}

# A session that runs $sql in a transaction and then sleeps, keeping its
# locks until release_session(): returned once it sleeps.
sub hold_session
{
	my ($sql) = @_;
	my $app = unique_name('holder');
	my $h = bg_psql("BEGIN; $sql; SELECT pg_sleep(3600); COMMIT;", $app);
	wait_until(sub { psql_ok("SELECT count(*) FROM pg_stat_activity WHERE application_name = '$app'"
			  . " AND wait_event = 'PgSleep'") == 1 }, 60)
	  or die "the holding session did not get its locks: $h->{err}";
	$h->{app} = $app;
	return $h;
}

sub release_session
{
	my ($h) = @_;
	psql_ok("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$h->{app}'");
	bg_finish($h);
}

# The source barrier: chunk workers stop at their first read of the source
# table $table (schema-qualified), in a lock wait that pg_stat_activity
# shows, with their chunk journaled running and its staging table created.
# A session holds ACCESS EXCLUSIVE on an index of the table ($index, by
# REINDEX in an open transaction).  Reading a chunk plans a query, which
# locks every index of the table; nothing before it does: the caller and
# the coordinator lock only the table itself, in ACCESS SHARE, which
# REINDEX's SHARE lock on the table lets through.  So no refresh step but
# the chunk reads waits, and nothing depends on timing.
sub hold_source
{
	my ($table, $index) = @_;
	my ($schema) = $table =~ /^(.*)\./;
	return hold_session("REINDEX INDEX $schema.$index");
}

sub release_source { release_session(@_); }

# Wait until $n chunk workers (or more) of invocation $inv wait at the
# source barrier, each in a chunk of its own; returns their pids by chunk
# number, or an empty list after $timeout seconds.
sub workers_held
{
	my ($inv, $n, $timeout) = @_;
	my @pids;
	wait_until(sub {
			@pids = split /\n/, psql_ok("SELECT c.worker_pid FROM dpwin.chunk c"
				  . " JOIN pg_stat_activity a ON a.pid = c.worker_pid AND a.backend_type = 'dpwin chunk worker'"
				  . " WHERE c.invocation_id = '$inv' AND c.state = 'running' AND a.wait_event_type = 'Lock'"
				  . " ORDER BY c.chunk_no");
			@pids >= $n;
		}, $timeout // 60)
	  or return ();
	return @pids;
}

# Processes of this cluster (children of its postmaster) whose command
# line matches $re: pid => command line.
sub cluster_processes
{
	my ($re, $postmaster) = @_;
	$postmaster //= postmaster_pid();
	my %found;
	opendir my $dh, '/proc' or die "/proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open my $st, '<', "/proc/$pid/stat" or next;
		my $stat = <$st> // '';
		close $st;
		my ($ppid) = $stat =~ /\)\s+\S+\s+(\d+)/;
		next unless defined $ppid && $ppid == $postmaster;
		open my $cl, '<', "/proc/$pid/cmdline" or next;
		my $cmd = do { local $/; <$cl> } // '';
		close $cl;
		$cmd =~ s/\0+$//;
		$found{$pid} = $cmd if $cmd =~ $re;
	}
	closedir $dh;
	return \%found;
}

# A field of /proc/<pid>/status in kB (VmHWM, RssAnon, ...); undef once the
# process is gone.
sub proc_status_kb
{
	my ($pid, $field) = @_;
	open my $fh, '<', "/proc/$pid/status" or return undef;
	my $status = do { local $/; <$fh> };
	close $fh;
	return $status =~ /^\Q$field\E:\s+(\d+) kB/m ? $1 : undef;
}

# Is process $pid blocked in poll(2)?  A dpwin process waits there, inside
# libcurl, for the answer to a request it has sent; its latch waits use
# epoll instead.  (x86-64 syscall numbers: poll 7, ppoll 271.)
sub waits_for_http
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/syscall" or return 0;
	my $line = <$fh> // '';
	close $fh;
	my ($nr) = $line =~ /^(\d+)/;
	return defined $nr && ($nr == 7 || $nr == 271);
}

# The sandbox's PostgreSQL server log: where it ends now, and what was
# written to it after such a mark.
sub pg_log_mark
{
	return -s (sandbox_root() . '/run/postgresql.log') // 0;
}

sub pg_log_since
{
	my ($mark) = @_;
	open my $fh, '<', sandbox_root() . '/run/postgresql.log' or die "the server log: $!";
	seek $fh, $mark, 0;
	local $/;
	my $text = <$fh> // '';
	close $fh;
	return $text;
}

# Does PostgreSQL accept connections?
sub pg_up
{
	my ($rc) = psql('SELECT 1', timeout => 5);
	return $rc == 0;
}

# The pid of invocation $inv's coordinator (it holds the target's lease);
# undef if no process holds it for $inv or PostgreSQL does not answer.
sub coordinator_pid
{
	my ($inv) = @_;
	my ($rc, $out) = psql("SELECT holder_pid FROM dpwin.lease WHERE holder_invocation = '$inv'", timeout => 10);
	return $rc == 0 && $out =~ /^\d+$/ ? $out : undef;
}

# This cluster's postmaster: the parent of its checkpointer (/proc is
# readable where the data directory may not be).
sub postmaster_pid
{
	my $ckpt = psql_ok("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	open my $st, '<', "/proc/$ckpt/stat" or die "/proc/$ckpt/stat: $!";
	my ($ppid) = <$st> =~ /\)\s+\S+\s+(\d+)/;
	close $st;
	return $ppid;
}

1;
