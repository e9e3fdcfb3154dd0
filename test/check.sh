#!/usr/bin/env bash
#
# test/check.sh — the test command: install what is missing, build, start a
# fresh sandbox (PostgreSQL 15 + the local ClickHouse endpoint), and run
# every test: pg_regress, isolation specs and the TAP suite.  Exits non-zero
# on any failure or any skipped test.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# A throwaway cluster and engine data per run.
test/sandbox.sh stop >/dev/null 2>&1 || true
rm -rf test/.sandbox/pg test/.sandbox/ch test/.sandbox/run test/.sandbox/*.log
test/sandbox.sh start
eval "$(test/sandbox.sh env)"
trap 'cd "$ROOT" && test/sandbox.sh stop' EXIT

status=0

echo "== pg_regress and isolation"
if ! { make -s regresscheck && make -s isolationcheck; }; then
	status=1
	for f in regression.diffs output_iso/regression.diffs; do
		[ -f "$f" ] && { echo "--- $f"; head -200 "$f"; }
	done
fi

echo "== TAP"
tap_log=$(mktemp)
# --directives prints every skipped assertion, so that none goes unnoticed.
if ! prove --directives -I test/lib test/t/*.t 2>&1 | tee "$tap_log"; then
	status=1
fi
if grep -Eiq 'skipped:|# skip' "$tap_log"; then
	echo "check: a TAP test was skipped; a skipped test is a failure" >&2
	status=1
fi
rm -f "$tap_log"

if [ $status -ne 0 ]; then
	echo "check: FAILED" >&2
	tail -50 test/.sandbox/run/postgresql.log >&2 || true
fi
exit $status
