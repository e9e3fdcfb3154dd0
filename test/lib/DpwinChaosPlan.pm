package DpwinChaosPlan;

# The schedule of the chaos run (test/chaos.sh, docs/chaos.md): which
# fault hits which target's window at which step of its refresh, in which
# query-id mode.  The seed and the trial count alone decide it: every
# random number is drawn here, before anything runs, so one seed gives one
# schedule whatever the machine's speed or what a trial finds.  This
# module needs no sandbox (`test/chaos.sh --seed S --plan` prints it).
#
# The trials come in rounds.  A round holds every fault kind on every
# shape once, in an order the seed shuffles, so that any run of at least
# one round's trials has hit each shape with each kind.

use strict;
use warnings;
use Exporter 'import';

our @EXPORT_OK = qw(@SHAPES @KINDS %STEPS @WINDOWS make_plan describe round_size);

our @SHAPES = qw(day flat month);

# The windows' ends: one-day windows ending 2026-10-01 to 2026-10-04.
our @WINDOWS = map { sprintf('2026-10-%02d 00:00:00+00', $_) } 1 .. 4;

# The steps of a refresh at which a fault strikes, by the text of the
# statement dpwin sends there (the endpoint matches it as a substring,
# regardless of case): DB is the run's database, %s the invocation's
# table prefix, %t the target.  Every refresh of every shape sends each of
# them; a trial whose step never comes fails.
our %STEPS = (
	admission => "FROM system.databases WHERE name = 'DB'",
	clone => 'CREATE TABLE `DB`.`%sgen` AS',
	stage => 'CREATE TABLE `DB`.`%sstg_',
	insert => 'INSERT INTO `DB`.`%sstg_',
	digest => 'SELECT count(), sum(reinterpretAsUInt64(sipHash128',
	count => 'SELECT countIf(',
	verify => '(SELECT count() FROM `DB`.`%sgen` PREWHERE',
	exchange => 'EXCHANGE TABLES `DB`.`%t` AND',
	backup => 'RENAME TABLE `DB`.`%sgen` TO',
	cleanup => 'DROP TABLE IF EXISTS `DB`.`%sstg_',
);

# The steps a chunk worker sends: a worker can be killed only there.
my @WORKER_STEPS = qw(stage insert digest);

# The fault kinds, each with the steps it may strike at.  Every kind but
# the endpoint's own faults strikes while the endpoint holds the step's
# statement, so that it lands exactly there.
my @ALL_STEPS = sort keys %STEPS;
our @KINDS = qw(kill_coordinator kill_worker restart_pg restart_ch cancel terminate takeover
  ep_error ep_lost none);
my %KIND_STEPS = map { $_ => \@ALL_STEPS } @KINDS;
$KIND_STEPS{kill_worker} = \@WORKER_STEPS;
$KIND_STEPS{none} = ['none'];

# ClickHouse error codes an ep_error answers with: TYPE_MISMATCH,
# TIMEOUT_EXCEEDED, MEMORY_LIMIT_EXCEEDED, ACCESS_DENIED and a code dpwin
# does not know.
my @ERROR_CODES = (53, 159, 241, 497, 999);

sub round_size
{
	my (@shapes) = @_;
	return @KINDS * @shapes;
}

# The plan of $n trials for seed $seed over the shapes @$shapes: a list of
# hashes no, kind, shape, window, step, mode, and code (ep_error).
sub make_plan
{
	my ($seed, $n, $shapes) = @_;
	srand($seed);
	my @plan;
	my @round;
	for my $no (1 .. $n)
	{
		if (!@round)
		{
			@round = map { my $k = $_; map { [ $k, $_ ] } @$shapes } @KINDS;
			# Fisher-Yates, on the seed's numbers
			for (my $i = $#round; $i > 0; $i--)
			{
				my $j = int(rand($i + 1));
				@round[ $i, $j ] = @round[ $j, $i ];
			}
		}
		my ($kind, $shape) = @{ shift @round };
		my $steps = $KIND_STEPS{$kind};
		# Every trial draws the same numbers in the same order, whatever
		# its kind uses, so that a trial's draws never shift the next one's.
		my %t = (no => $no, kind => $kind, shape => $shape);
		$t{window} = $WINDOWS[ int(rand(@WINDOWS)) ];
		$t{step} = $steps->[ int(rand(@$steps)) ];
		$t{mode} = rand() < 0.5 ? 'visible' : 'hidden';
		my $code = $ERROR_CODES[ int(rand(@ERROR_CODES)) ];
		$t{code} = $code if $kind eq 'ep_error';
		push @plan, \%t;
	}
	return @plan;
}

# One line for trial $t.
sub describe
{
	my ($t) = @_;
	return sprintf('trial %d: %s%s on %s window %s%s, query ids %s', $t->{no}, $t->{kind},
		defined $t->{code} ? " (code $t->{code})" : '', $t->{shape}, substr($t->{window}, 0, 10),
		$t->{kind} eq 'none' ? '' : " at $t->{step}", $t->{mode});
}

# The options of test/chaos.sh: seed (default a new one), trials (default
# one round), length (a cap in seconds, or undef), shapes (a list), plan.
sub options
{
	my (@args) = @_;
	my %o = (seed => time() % 1_000_000);
	my $usage = "usage: test/chaos.sh [--seed N] [--trials N] [--length SECONDS] [--shapes day,month,flat] [--plan]\n";
	while (@args)
	{
		my $a = shift @args;
		if ($a =~ /^--(seed|trials|length|shapes)$/) { $o{$1} = shift(@args) // die $usage }
		elsif ($a =~ /^--(seed|trials|length|shapes)=(.*)$/) { $o{$1} = $2 }
		elsif ($a eq '--plan') { $o{plan} = 1 }
		else { die $usage }
	}
	for my $k (qw(seed trials length))
	{
		die "--$k is a whole number\n" if defined $o{$k} && $o{$k} !~ /^\d+$/;
	}
	my %known = map { $_ => 1 } @SHAPES;
	$o{shapes} = [ defined $o{shapes} ? split(/,/, $o{shapes}) : @SHAPES ];
	die "--shapes names day, month or flat\n" if !@{ $o{shapes} } || grep { !$known{$_} } @{ $o{shapes} };
	$o{trials} //= round_size(@{ $o{shapes} });
	return %o;
}

# test/chaos.sh --plan: print the plan, one line a trial, and nothing else.
sub print_plan
{
	my %o = options(@_);
	print describe($_), "\n" for make_plan($o{seed}, $o{trials}, $o{shapes});
	return 0;
}

1;
