#!/bin/bash
# The seeded chaos run (docs/chaos.md): random faults at random moments of
# refreshes of three target shapes, with a writer changing the source and a
# reader polling the targets throughout.  Runs against the sandbox named by
# DPWIN_SANDBOX_DIR, DPWIN_PGPORT, DPWIN_CH_PORT and DPWIN_CH_CONTROL_PORT
# (test/sandbox.sh start first).  Prints the seed, the counts and a last
# line "N passed, M failed"; exits 1 if any trial failed.
#
#   test/chaos.sh [--seed N] [--length SECONDS] [--shapes day,month,flat]
#                 (default: a new seed, 120 s, every shape)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(test/sandbox.sh env)"
exec perl -I test/lib -MDpwinChaos -e 'exit DpwinChaos::main(@ARGV)' -- "$@"
