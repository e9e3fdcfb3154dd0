#!/usr/bin/env bash
#
# test/check.sh [TAP_FILE...] — the test command: for each PostgreSQL major
# asked for, install what is missing, build, start a fresh sandbox (that
# PostgreSQL + the local ClickHouse endpoint) and run the pg_regress suite,
# the isolation specs and the TAP files (all of test/t by default).  Exits
# non-zero on any failure or any skipped test.
#
#   DPWIN_PG     the majors, in order (default "15"), e.g. "15 17 18 19"
#   DPWIN_SIDE_BY_SIDE=1
#                the majors after the first run side by side, once the
#                first is done; each one's output is printed when it ends
#   DPWIN_SIDE_BY_SIDE=all
#                every major runs side by side, the first at once and each
#                later one as soon as its chroot is made; the commands of
#                DPWIN_CHECK_ALONGSIDE start once every major has started
#   DPWIN_TAP_OTHER
#                the TAP files to run on the majors other than 15, as file
#                names or their number prefixes ("060 062 100"); by
#                default the same TAP files as on 15
#   DPWIN_TAP_EVERY, DPWIN_TAP_SHARED
#                instead of all of test/t: the TAP files every major runs,
#                and those shared out among the majors side by side (the
#                major of rank k of n runs every n-th from the k-th, or,
#                where DPWIN_TAP_SHARED is n groups parted by "|", the
#                k-th group); every file of test/t must be in one of them
#   DPWIN_SANDBOX_DIR, DPWIN_PGPORT, DPWIN_CH_PORT, DPWIN_CH_CONTROL_PORT
#                as for test/sandbox.sh; with several majors, the major
#                of rank i (from 0) gets the folder "$DPWIN_SANDBOX_DIR-M"
#                and each port given plus 10 * i (unset, each major has
#                ports of its own)
#
# The chroots of the majors after the first (test/pg/chroot.sh) are made in
# the background while the first major's suite runs, each waited for just
# before its major starts: making them needs the network and the disk more
# than the CPU, and it is one to three minutes per major.
#
#   DPWIN_FAULT_MATRIX_OTHER
#                the size of the fault matrix (test/t/111-113, full, slice
#                or rest: docs/chaos.md) on the majors other than the first;
#                DPWIN_FAULT_MATRIX sets it on the first (default full)
#   DPWIN_FAULT_MATRIX_SHARED=1
#                with the majors side by side: the full matrix, shared out
#                among them, each running every n-th case (so that every
#                case of every shape in both modes runs once per run)
#   DPWIN_FAULT_MATRIX_ONLY_OTHER
#                a regexp of the fault matrix's case names that the majors
#                other than the first run (default: every case)
#   DPWIN_CHAOS_SECONDS, DPWIN_CHAOS_TRIALS, DPWIN_CHAOS_SEED, DPWIN_CHAOS_MAJOR
#                after the TAP files of the first major (or of
#                DPWIN_CHAOS_MAJOR), the seeded chaos run (test/chaos.sh)
#                on its sandbox: that many trials (default one round,
#                every fault kind on every shape), with that seed (default
#                21), starting none after DPWIN_CHAOS_SECONDS
#   DPWIN_CHECK_ALONGSIDE
#                shell commands run while the majors after the first run
#                side by side (the package and pg_upgrade checks in CI);
#                their output is printed when they end, and their failure
#                fails the run
#
# On a major without a pg_cron package (test/pg/majors.sh) the TAP files
# that schedule jobs run every part that does not need pg_cron.
# The elapsed time of each part and of each major is printed as it ends,
# and all of them again at the end.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. test/pg/majors.sh

majors=${DPWIN_PG:-15}
for m in $majors; do pg_major_spec "$m" >/dev/null || exit 2; done
nmajors=$(wc -w <<<"$majors")
tap_args=("$@")
if [ $# -gt 0 ]; then tap_files=("$@"); else tap_files=(test/t/*.t); fi
base_sb=${DPWIN_SANDBOX_DIR:-}
base_ports=("${DPWIN_PGPORT:-}" "${DPWIN_CH_PORT:-}" "${DPWIN_CH_CONTROL_PORT:-}")
side_by_side=${DPWIN_SIDE_BY_SIDE:-0}
# set when this run is one major of a side-by-side run: where its summary goes
summary_file=${DPWIN_CHECK_SUMMARY:-}
unset DPWIN_CHECK_SUMMARY

# DPWIN_TAP_OTHER, resolved to files now, so that a misspelt entry fails
# before anything runs rather than after the first major.
tap_other=()
if [ -n "${DPWIN_TAP_OTHER:-}" ]; then
	for t in $DPWIN_TAP_OTHER; do
		if [ -f "$t" ]; then
			tap_other+=("$t")
			continue
		fi
		matches=(test/t/"$t"_*.t)
		if [ ${#matches[@]} -ne 1 ] || [ ! -f "${matches[0]}" ]; then
			echo "check: DPWIN_TAP_OTHER: '$t' names no single TAP file of test/t" >&2
			exit 2
		fi
		tap_other+=("${matches[0]}")
	done
fi

# DPWIN_TAP_EVERY and DPWIN_TAP_SHARED, likewise; with them, every file of
# test/t must be in one of the two, so that a new file is never left out.
resolve_taps() {
	local t matches
	for t in $1; do
		[ "$t" != '|' ] || { echo '|'; continue; }
		matches=(test/t/"$t"_*.t)
		if [ ${#matches[@]} -ne 1 ] || [ ! -f "${matches[0]}" ]; then
			echo "check: '$t' names no single TAP file of test/t" >&2
			return 1
		fi
		echo "${matches[0]}"
	done
}
tap_every=() tap_shared=()
list=$(resolve_taps "${DPWIN_TAP_EVERY:-}") || exit 2
[ -z "$list" ] || mapfile -t tap_every <<<"$list"
list=$(resolve_taps "${DPWIN_TAP_SHARED:-}") || exit 2
[ -z "$list" ] || mapfile -t tap_shared <<<"$list"
if [ -n "${DPWIN_TAP_EVERY:-}${DPWIN_TAP_SHARED:-}" ] && [ $# -eq 0 ]; then
	# A lookup table, not `printf | grep -q`: under pipefail, grep -q
	# leaving early can fail printf with SIGPIPE and the file look missing.
	declare -A listed=()
	for t in ${tap_every[@]+"${tap_every[@]}"} ${tap_shared[@]+"${tap_shared[@]}"}; do listed[$t]=1; done
	for t in test/t/*.t; do
		if [ -z "${listed[$t]:-}" ]; then
			echo "check: $t is in neither DPWIN_TAP_EVERY nor DPWIN_TAP_SHARED" >&2
			exit 2
		fi
	done
fi

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
	local files=() tap_log rc=0 chosen=("${tap_files[@]}")
	pg_major_spec "$major"
	if [ ${#tap_args[@]} -eq 0 ] && [ $((${#tap_every[@]} + ${#tap_shared[@]})) -gt 0 ]; then
		local part=${DPWIN_TAP_PART:-0/1} i
		local k=${part%/*} n=${part#*/}
		chosen=(${tap_every[@]+"${tap_every[@]}"})
		if printf '%s\n' ${tap_shared[@]+"${tap_shared[@]}"} | grep -xF '|' >/dev/null; then
			# n groups parted by "|": the k-th is this major's
			local group=0 t
			for t in "${tap_shared[@]}"; do
				if [ "$t" = '|' ]; then group=$((group + 1)); continue; fi
				[ "$n" != 1 ] && [ "$group" != "$k" ] || chosen+=("$t")
			done
			if [ "$n" != 1 ] && [ "$group" != $((n - 1)) ]; then
				echo "check: DPWIN_TAP_SHARED has $((group + 1)) groups for $n majors" >&2
				return 1
			fi
		else
			for i in "${!tap_shared[@]}"; do
				[ $((i % n)) != "$k" ] || chosen+=("${tap_shared[$i]}")
			done
		fi
		mapfile -t chosen < <(printf '%s\n' "${chosen[@]}" | sort)
		echo "check: PostgreSQL $major runs ${#chosen[@]} of the TAP files (DPWIN_TAP_EVERY, DPWIN_TAP_SHARED part $part)"
	elif [ "$major" != 15 ] && [ ${#tap_other[@]} -gt 0 ]; then
		chosen=("${tap_other[@]}")
		echo "check: PostgreSQL $major runs ${#chosen[@]} of the TAP files (DPWIN_TAP_OTHER)"
	fi
	# Every file runs on every major: where pg_cron is not packaged
	# (PG_CRON=0), the files that schedule jobs leave out only the parts
	# that need it, and say so in a diag line.
	files=("${chosen[@]}")
	[ ${#files[@]} -gt 0 ] || return 0
	tap_log=$(mktemp)
	# the branches the fault matrix's timing-dependent cases took
	# (test/lib/DpwinMatrix.pm, hedge()), counted in the summary
	rm -f "$DPWIN_SANDBOX/hedges.log"
	# --directives prints every skipped assertion, so that none goes unnoticed.
	prove --timer --directives -I test/lib "${files[@]}" 2>&1 | tee "$tap_log" || rc=1
	if grep -Eiq 'skipped:|# skip' "$tap_log"; then
		echo "check: a TAP test was skipped; a skipped test is a failure" >&2
		rc=1
	fi
	# what failed, again in the summary at the end, where a reader of the
	# last lines of a long run finds it
	if [ $rc != 0 ]; then
		mapfile -t -O ${#summary[@]} summary < <(
			{ grep -E '^not ok|^#   Failed test|skipped:|# skip' "$tap_log" | head -20 || true
				sed -n '/^Test Summary Report/,/^Files=/p' "$tap_log" | head -30; } |
				sed "s/^/$major  | /")
	fi
	rm -f "$tap_log"
	if [ -s "$DPWIN_SANDBOX/hedges.log" ]; then
		mapfile -t -O ${#summary[@]} summary < <(sort "$DPWIN_SANDBOX/hedges.log" | uniq -c |
			awk -v m="$major" '{ printf "%-3s hedge      %s %s: %d\n", m, $2, $3, $1 }')
	fi
	return $rc
}

run_chaos() {
	local log rc=0
	log=$(mktemp)
	test/chaos.sh --seed "${DPWIN_CHAOS_SEED:-21}" ${DPWIN_CHAOS_TRIALS:+--trials "$DPWIN_CHAOS_TRIALS"} \
		--length "$DPWIN_CHAOS_SECONDS" 2>&1 | tee "$log" || rc=1
	if [ $rc != 0 ]; then
		mapfile -t -O ${#summary[@]} summary < <({ grep -B2 'FAIL' "$log" || true; } | head -30 | sed "s/^/$major  | /")
	fi
	rm -f "$log"
	return $rc
}

# sandbox_of MAJOR: its sandbox folder
sandbox_of() {
	if [ -z "$base_sb" ]; then
		# the folder test/sandbox.sh would choose by default
		if [ "$1" = 15 ]; then echo "$ROOT/test/.sandbox"; else echo "$ROOT/test/.sandbox-$1"; fi
	elif [ "$nmajors" -eq 1 ]; then
		echo "$base_sb"
	else
		echo "$base_sb-$1"
	fi
}

# export_ports MAJOR: the ports asked for, shifted by the major's rank, so
# that side-by-side majors never share one.
export_ports() {
	local rank=0 m i
	local names=(DPWIN_PGPORT DPWIN_CH_PORT DPWIN_CH_CONTROL_PORT)
	for m in $majors; do
		[ "$m" = "$1" ] && break
		rank=$((rank + 1))
	done
	for i in 0 1 2; do
		[ -z "${base_ports[$i]}" ] || export "${names[$i]}=$((base_ports[i] + 10 * rank))"
	done
}

check_major() {
	local sb t0 ok=1
	t0=$(date +%s)
	sb=$(sandbox_of "$major")
	echo "== PostgreSQL $major"
	if [ -n "${chroot_pid[$major]:-}" ] && ! part chroot wait_chroot; then
		return 0
	fi
	# A throwaway cluster and engine data per run; the folder's previous
	# sandbox, of whatever major, is stopped first.
	DPWIN_PG='' DPWIN_SANDBOX_DIR=$sb test/sandbox.sh stop >/dev/null 2>&1 || true
	rm -rf "${sb:?}/pg" "$sb/ch" "$sb/run" "$sb"/*.log "$sb/pg_major"
	export DPWIN_PG=$major DPWIN_SANDBOX_DIR=$sb
	export_ports "$major"
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
	if [ -n "${DPWIN_CHAOS_SECONDS:-}" ] && [ "$major" = "${DPWIN_CHAOS_MAJOR:-${majors%% *}}" ]; then
		part chaos run_chaos || ok=0
	fi
	if [ $ok = 0 ]; then
		echo "check: PostgreSQL $major FAILED" >&2
		tail -50 "$sb/run/postgresql.log" >&2 || true
	fi
	test/sandbox.sh stop || true
	current_sb=
	printf -- '-- PostgreSQL %s: %s in all\n' "$major" "$(elapsed "$t0")"
	summary+=("$(printf '%-3s %-10s %-7s %s' "$major" "(all)" "$([ $ok = 1 ] && echo passed || echo FAILED)" "$(elapsed "$t0")")")
}

# The chroot makers started in the background, by major, with their logs.
declare -A chroot_pid chroot_log

# start_chroots: start making the chroots of the majors after the first,
# those missing.  debootstrap is installed on the machine first, in the
# foreground: the first major's sandbox installs its packages with apt-get,
# and two apt-get runs on one machine cannot overlap.
start_chroots() {
	local m first=1
	for m in $majors; do
		[ $first = 1 ] && { first=0; continue; }
		pg_major_spec "$m"
		[ -n "$PG_SUITE" ] || continue
		if ! command -v debootstrap >/dev/null; then
			echo "check: installing debootstrap"
			host_apt_get update -qq
			host_apt_get install -y -qq debootstrap >/dev/null
		fi
		mkdir -p "$ROOT/test/.pg"
		chroot_log[$m]=$ROOT/test/.pg/$m.make.log
		echo "check: the PostgreSQL $m chroot is made, if missing, in the background (log: test/.pg/$m.make.log)"
		# a process group of its own, so that an interrupted run can end
		# the maker with its debootstrap and apt-get
		setsid bash -c 't0=$(date +%s); test/pg/chroot.sh ensure "$1" || exit
			s=$(($(date +%s) - t0)); printf "check: PostgreSQL %s chroot ready in %d:%02d\n" "$1" $((s / 60)) $((s % 60))' \
			_ "$m" >"${chroot_log[$m]}" 2>&1 &
		chroot_pid[$m]=$!
	done
}

# wait_chroot: the chroot of $major, made in the background, is ready.
wait_chroot() {
	local pid=${chroot_pid[$major]:-}
	[ -n "$pid" ] || return 0
	unset "chroot_pid[$major]"
	if ! wait "$pid"; then
		echo "check: making the PostgreSQL $major chroot failed:" >&2
		tail -30 "${chroot_log[$major]}" >&2
		return 1
	fi
	grep '^check: ' "${chroot_log[$major]}" || true
}

# major_rank MAJOR: its rank, from 0, among the majors
major_rank() {
	local rank=0 m
	for m in $majors; do
		[ "$m" = "$1" ] && break
		rank=$((rank + 1))
	done
	echo "$rank"
}

# The majors run side by side: pid, by major, of the check.sh of each one.
declare -A side_pid

# run_side_by_side MAJOR...: each major in a check.sh of its own, in a
# process group of its own (so that an interrupted run can end it), its
# output kept in a file and printed, major after major, as each ends.
run_side_by_side() {
	local logs m t0
	t0=$(date +%s)
	logs=$(mktemp -d)
	for major in "$@"; do
		if [ -n "${chroot_pid[$major]:-}" ] && ! part chroot wait_chroot; then
			continue
		fi
		(
			export_ports "$major"
			# the first major keeps the first major's settings (all
			# majors side by side); the others take the _OTHER ones
			extra=()
			if [ "$major" != "${majors%% *}" ]; then
				extra=("DPWIN_FAULT_MATRIX=${DPWIN_FAULT_MATRIX_OTHER:-${DPWIN_FAULT_MATRIX:-full}}")
				[ -z "${DPWIN_FAULT_MATRIX_ONLY_OTHER:-}" ] ||
					extra+=("DPWIN_FAULT_MATRIX_ONLY=$DPWIN_FAULT_MATRIX_ONLY_OTHER")
			fi
			# the shared TAP files and the fault matrix shared out among
			# the majors side by side
			[ -z "${DPWIN_TAP_SHARED:-}" ] ||
				extra+=("DPWIN_TAP_PART=$(major_rank "$major")/$nmajors")
			[ "${DPWIN_FAULT_MATRIX_SHARED:-0}" != 1 ] ||
				extra+=(DPWIN_FAULT_MATRIX=full "DPWIN_FAULT_MATRIX_PART=$(major_rank "$major")/$nmajors")
			# the chaos run on one major only
			[ "$major" = "${DPWIN_CHAOS_MAJOR:-${majors%% *}}" ] || extra+=(DPWIN_CHAOS_SECONDS=)
			exec setsid env DPWIN_PG="$major" DPWIN_SANDBOX_DIR="$(sandbox_of "$major")" \
				DPWIN_SIDE_BY_SIDE=0 DPWIN_CHECK_SUMMARY="$logs/$major.summary" \
				DPWIN_CHECK_ALONGSIDE= ${extra[@]+"${extra[@]}"} \
				bash test/check.sh ${tap_args[@]+"${tap_args[@]}"} >"$logs/$major.log" 2>&1
		) &
		side_pid[$major]=$!
	done
	if [ -n "${DPWIN_CHECK_ALONGSIDE:-}" ]; then
		setsid bash -c "$DPWIN_CHECK_ALONGSIDE" >"$logs/alongside.log" 2>&1 &
		side_pid[alongside]=$!
		echo "== alongside: $DPWIN_CHECK_ALONGSIDE"
	fi
	echo "== PostgreSQL $*: side by side"
	for m in "$@"; do
		[ -n "${side_pid[$m]:-}" ] || continue
		wait "${side_pid[$m]}" || status=1
		unset "side_pid[$m]"
		cat "$logs/$m.log"
		[ -f "$logs/$m.summary" ] || {
			status=1
			summary+=("$(printf '%-3s %-10s %s' "$m" "(all)" "FAILED")")
			continue
		}
		mapfile -t -O ${#summary[@]} summary <"$logs/$m.summary"
	done
	if [ -n "${side_pid[alongside]:-}" ]; then
		local result=passed
		wait "${side_pid[alongside]}" || result=FAILED
		unset "side_pid[alongside]"
		echo "== alongside: $DPWIN_CHECK_ALONGSIDE"
		cat "$logs/alongside.log"
		[ $result = passed ] || status=1
		summary+=("$(printf '%-3s %-10s %-7s %s' "-" "alongside" "$result" "$(elapsed "$t0")")")
	fi
	rm -rf "$logs"
	summary+=("$(printf '%s side by side: %s' "$*" "$(elapsed "$t0")")")
}

# An interrupted run stops the sandboxes it was using, and the chroot
# makers and side-by-side runs it started.
current_sb=
on_exit() {
	local pid m
	for pid in "${chroot_pid[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
	for m in "${!side_pid[@]}"; do
		kill -- "-${side_pid[$m]}" 2>/dev/null || true
		# that run stops its sandbox too, as it ends: whichever comes second
		# finds nothing to stop
		DPWIN_PG="" DPWIN_SANDBOX_DIR=$(sandbox_of "$m") test/sandbox.sh stop >/dev/null 2>&1 || true
	done
	[ -z "$current_sb" ] || DPWIN_PG="" DPWIN_SANDBOX_DIR=$current_sb test/sandbox.sh stop
}
trap on_exit EXIT

t_all=$(date +%s)
start_chroots
if [ "$side_by_side" = all ] && [ "$nmajors" -gt 1 ]; then
	# shellcheck disable=SC2086
	run_side_by_side $majors
elif [ "$side_by_side" = 1 ] && [ "$nmajors" -gt 1 ]; then
	read -r major rest <<<"$majors"
	check_major
	# shellcheck disable=SC2086
	run_side_by_side $rest
else
	for major in $majors; do
		check_major
	done
fi

if [ -n "$summary_file" ]; then
	printf '%s\n' "${summary[@]}" >"$summary_file"
	exit $status
fi
echo "== elapsed"
printf '%s\n' "${summary[@]}"
echo "all majors: $(elapsed "$t_all")"

# A case whose branch depends on timing records the branch it took
# (DpwinEndpoint::hedge).  With DPWIN_HEDGES_REQUIRED=1 (CI), each such
# site that ran must have taken its usual branch at least once across
# the run, on any major, shape or mode: a regression that always takes
# the fallback fails the run instead of passing unseen.
hedges_required="chr_extracting completed
chr_verified failed
chr_publishing left_to_recover
x_lost_restart completed
x_stubborn_restart server_down
ins_stubborn_restart server_down
103_restart_pub settled
107_restart_ch completed"
if [ "${DPWIN_HEDGES_REQUIRED:-0}" = 1 ]; then
	while read -r site branch; do
		# summary lines: "<major> hedge <site>/<mode or shape> <branch>: <count>"
		ran=$(printf '%s\n' "${summary[@]}" | awk -v s="$site" \
			'$2 == "hedge" && index($3, s) == 1 { n += $5 } END { print n + 0 }')
		usual=$(printf '%s\n' "${summary[@]}" | awk -v s="$site" -v b="$branch:" \
			'$2 == "hedge" && index($3, s) == 1 && $4 == b { n += $5 } END { print n + 0 }')
		echo "hedge $site: $usual of $ran took $branch"
		if [ "$ran" -gt 0 ] && [ "$usual" -eq 0 ]; then
			echo "check: the hedged site $site never took its usual branch $branch" >&2
			status=1
		fi
	done <<<"$hedges_required"
fi
if [ $status -ne 0 ]; then
	echo "check: FAILED" >&2
fi
exit $status
