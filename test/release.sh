#!/usr/bin/env bash
#
# test/release.sh — the release checks that need more than one sandbox's
# PostgreSQL: the Debian package built, linted, installed with dpkg into a
# clean Debian 12 root and refreshing the demo route there
# (test/pkg/check.sh), and pg_upgrade from 18 to 19 with dpwin's routes,
# journal and evidence present (test/pg/upgrade.sh).  Both use the
# ClickHouse endpoint of a sandbox of their own (test/.sandbox-release,
# PostgreSQL 15, ports 25900, 18900 and 18901 unless DPWIN_SANDBOX_DIR and
# the DPWIN_*PORT variables say otherwise), started here and stopped at the
# end.  CI runs it beside the majors after the first (test/check.sh,
# DPWIN_CHECK_ALONGSIDE).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export DPWIN_PG=15
export DPWIN_SANDBOX_DIR=${DPWIN_SANDBOX_DIR:-$ROOT/test/.sandbox-release}
export DPWIN_PGPORT=${DPWIN_PGPORT:-25900} DPWIN_CH_PORT=${DPWIN_CH_PORT:-18900}
export DPWIN_CH_CONTROL_PORT=${DPWIN_CH_CONTROL_PORT:-18901}

elapsed() { local s=$(($(date +%s) - $1)); printf '%d:%02d' $((s / 60)) $((s % 60)); }

test/sandbox.sh stop >/dev/null 2>&1 || true
rm -rf "${DPWIN_SANDBOX_DIR:?}/pg" "$DPWIN_SANDBOX_DIR/ch"
trap 'test/sandbox.sh stop >/dev/null 2>&1 || true' EXIT
test/sandbox.sh start >/dev/null
status=0
for step in test/pkg/check.sh test/pg/upgrade.sh; do
	t0=$(date +%s)
	if bash "$step"; then r=passed; else r=FAILED; status=1; fi
	echo "release: $step $r in $(elapsed "$t0")"
done
exit $status
