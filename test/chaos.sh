#!/bin/bash
# The seeded chaos run (docs/chaos.md): faults at chosen steps of
# refreshes of three target shapes, with a writer changing the source and
# a reader polling the targets throughout.  The seed and the trial count
# alone decide the schedule.  Runs against the sandbox named by
# DPWIN_SANDBOX_DIR, DPWIN_PGPORT, DPWIN_CH_PORT and DPWIN_CH_CONTROL_PORT
# (test/sandbox.sh start first).  Prints the seed, each trial, the counts
# and a last line "N passed, M failed"; exits 1 if any trial failed.
#
#   test/chaos.sh [--seed N] [--trials N] [--length SECONDS]
#                 [--shapes day,month,flat] [--plan]
#
# (default: a new seed, one round: every fault kind on every shape once).
# --length stops starting trials after that many seconds; --plan prints
# the schedule, one line a trial, and runs nothing (no sandbox needed).
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
	if [ "$a" = --plan ]; then
		exec perl -I test/lib -MDpwinChaosPlan -e 'exit DpwinChaosPlan::print_plan(@ARGV)' -- "$@"
	fi
done
eval "$(test/sandbox.sh env)"
exec perl -I test/lib -MDpwinChaos -e 'exit DpwinChaos::main(@ARGV)' -- "$@"
