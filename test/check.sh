#!/usr/bin/env bash
#
# test/check.sh [TAP_FILE...] — the test command: for each PostgreSQL major
# asked for, install what is missing, build, start a fresh sandbox (that
# PostgreSQL + the local ClickHouse endpoint) and run the pg_regress suite,
# the isolation specs and the TAP files (all of test/t by default).  Exits
# non-zero on any failure or any skipped test.
#
#   DPWIN_PG     the majors, in order (default "15"), e.g. "15 17 18 19"
#   DPWIN_SANDBOX_DIR, DPWIN_PGPORT, DPWIN_CH_PORT, DPWIN_CH_CONTROL_PORT
#                as for test/sandbox.sh; with several majors, each major M
#                gets the folder "$DPWIN_SANDBOX_DIR-M"
#
# The TAP files that schedule jobs with pg_cron are left out, with a line
# saying so, on a major that has no pg_cron package (test/pg/majors.sh).
# The elapsed time of each part and of each major is printed as it ends,
# and all of them again at the end.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. test/pg/majors.sh

majors=${DPWIN_PG:-15}
for m in $majors; do pg_major_spec "$m" >/dev/null || exit 2; done
nmajors=$(wc -w <<<"$majors")
if [ $# -gt 0 ]; then tap_files=("$@"); else tap_files=(test/t/*.t); fi
base_sb=${DPWIN_SANDBOX_DIR:-}

status=0
summary=()

# mm:ss since $1 (seconds since the epoch)
elapsed() {
	local s=$(($(date +%s) - $1))
	printf '%d:%02d' $((s / 60)) $((s % 60))
}

# part NAME COMMAND...: run one part, print and record its time and result.
part() {
	local name=$1 t0 result=passed
	shift
	t0=$(date +%s)
	"$@" || result=FAILED
	[ "$result" = passed ] || status=1
	printf -- '-- PostgreSQL %s %s: %s in %s\n' "$major" "$name" "$result" "$(elapsed "$t0")"
	summary+=("$(printf '%-3s %-10s %-7s %s' "$major" "$name" "$result" "$(elapsed "$t0")")")
	[ "$result" = passed ]
}

run_regress() {
	test/sandbox.sh make -s regresscheck && return 0
	show_diffs regression.diffs
	return 1
}

run_isolation() {
	test/sandbox.sh make -s isolationcheck && return 0
	show_diffs output_iso/regression.diffs
	return 1
}

show_diffs() {
	local f=$DPWIN_SANDBOX/build/$1
	[ -f "$f" ] && { echo "--- $1"; head -200 "$f"; }
	return 0
}

run_tap() {
	local files=() f tap_log rc=0
	pg_major_spec "$major"
	for f in "${tap_files[@]}"; do
		if [ "$PG_CRON" = 0 ] && grep -q 'cron\.schedule' "$f"; then
			echo "check: $f not run on PostgreSQL $major: it schedules pg_cron jobs, and no pg_cron package exists for $major"
			continue
		fi
		files+=("$f")
	done
	[ ${#files[@]} -gt 0 ] || return 0
	tap_log=$(mktemp)
	# --directives prints every skipped assertion, so that none goes unnoticed.
	prove --timer --directives -I test/lib "${files[@]}" 2>&1 | tee "$tap_log" || rc=1
	if grep -Eiq 'skipped:|# skip' "$tap_log"; then
		echo "check: a TAP test was skipped; a skipped test is a failure" >&2
		rc=1
	fi
	rm -f "$tap_log"
	return $rc
}

check_major() {
	local sb t0 ok=1
	t0=$(date +%s)
	# the folder test/sandbox.sh would choose by default
	if [ -z "$base_sb" ]; then
		if [ "$major" = 15 ]; then sb=$ROOT/test/.sandbox; else sb=$ROOT/test/.sandbox-$major; fi
	elif [ "$nmajors" -eq 1 ]; then
		sb=$base_sb
	else
		sb=$base_sb-$major
	fi
	echo "== PostgreSQL $major"
	# A throwaway cluster and engine data per run; the folder's previous
	# sandbox, of whatever major, is stopped first.
	DPWIN_PG='' DPWIN_SANDBOX_DIR=$sb test/sandbox.sh stop >/dev/null 2>&1 || true
	rm -rf "${sb:?}/pg" "$sb/ch" "$sb/run" "$sb"/*.log "$sb/pg_major"
	export DPWIN_PG=$major DPWIN_SANDBOX_DIR=$sb
	current_sb=$sb
	if ! part start test/sandbox.sh start; then
		tail -50 "$sb/run/postgresql.log" >&2 2>/dev/null || true
		test/sandbox.sh stop || true
		current_sb=
		return 0
	fi
	eval "$(test/sandbox.sh env)"
	part regress run_regress || ok=0
	part isolation run_isolation || ok=0
	part TAP run_tap || ok=0
	if [ $ok = 0 ]; then
		echo "check: PostgreSQL $major FAILED" >&2
		tail -50 "$sb/run/postgresql.log" >&2 || true
	fi
	test/sandbox.sh stop || true
	current_sb=
	printf -- '-- PostgreSQL %s: %s in all\n' "$major" "$(elapsed "$t0")"
	summary+=("$(printf '%-3s %-10s %-7s %s' "$major" "(all)" "$([ $ok = 1 ] && echo passed || echo FAILED)" "$(elapsed "$t0")")")
}

# An interrupted run stops the sandbox it was using.
current_sb=
trap '[ -z "$current_sb" ] || DPWIN_PG="" DPWIN_SANDBOX_DIR=$current_sb test/sandbox.sh stop' EXIT

t_all=$(date +%s)
for major in $majors; do
	check_major
done

echo "== elapsed"
printf '%s\n' "${summary[@]}"
echo "all majors: $(elapsed "$t_all")"
if [ $status -ne 0 ]; then
	echo "check: FAILED" >&2
fi
exit $status
