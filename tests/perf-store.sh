#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# perf-store.sh PERF - gradwire-perf under a launcher (RANK/WORLD_SIZE) with
# --store DIR: a subfolder per job, removed at the end, and progress from
# rank 0 only.
#
#  1. A job id (TORCHELASTIC_RUN_ID, then --job over it) puts the store in
#     DIR/job-<id>: DIR holds a stale key of an "earlier run" (a host id
#     of the wrong length) and a file of the user's; the run passes and
#     leaves DIR exactly as it found it (its subfolder gone). The same
#     job id twice in a row passes too (nothing left to empty); --job
#     wins over the launcher's id.
#  2. No job id: rank 0 says so (naming --job), DIR itself is the store,
#     and afterwards this job's keys are gone from it and an unrelated file
#     is kept, so a second run in the same DIR passes.
#  3. Rank 1 prints nothing at all (no rows, no progress); rank 0 prints
#     the table and one "done" line per size.
# Two ranks over loopback (net), in a temporary folder removed on exit.
set -euo pipefail
perf=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export FI_TCP_IFACE=lo FI_NET_IFACE=lo GRADWIRE_IFACE=lo \
	GRADWIRE_PROVIDER_LOCAL=main \
	GRADWIRE_TIMEOUT_MS=20000
unset TORCHELASTIC_RUN_ID SLURM_JOB_ID SLURM_STEP_ID PMIX_NAMESPACE OMPI_MCA_ess_base_jobid \
	OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMIX_RANK PMI_RANK

fail() {
	echo "FAIL: $*"
	for f in "$tmp"/out.* "$tmp"/err.*; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

# run NAME ENV... -- ARGS...: both ranks, outputs in $tmp/{out,err}.NAME.R
run() {
	local name=$1 envs=() pids=() r
	shift
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	for r in 0 1; do
		env RANK=$r WORLD_SIZE=2 "${envs[@]}" timeout 60 "$perf" -b 4K -e 64K -f 16 \
			-w 1 -i 3 --check --timeout-s 50 "$@" \
			> "$tmp/out.$name.$r" 2> "$tmp/err.$name.$r" &
		pids+=($!)
	done
	for r in 0 1; do
		wait "${pids[$r]}" || fail "$name: rank $r exited $?"
	done
}

store=$tmp/store
mkdir "$store"
echo keep > "$store/keep"
# A stale host id of rank 1 (4 bytes, where 8 are read) in DIR itself.
printf 'xxxx' > "$store/gw%2Fhost%2F1"
stale() { ls "$store" | sort | tr '\n' ' '; }
before=$(stale)

run job1 TORCHELASTIC_RUN_ID=t1 -- --store "$store"
[ "$(stale)" = "$before" ] || fail "job1: DIR changed: '$before' -> '$(stale)'"
run job1-again TORCHELASTIC_RUN_ID=t1 -- --store "$store"
[ "$(stale)" = "$before" ] || fail "job1-again: DIR changed: '$(stale)'"
# --job wins over the launcher's id: job-t1 holds a stale key now.
mkdir "$store/job-t1"
printf 'xxxx' > "$store/job-t1/gw%2Fhost%2F1"
before2=$(stale)
run job2 TORCHELASTIC_RUN_ID=t1 -- --store "$store" --job 'a/b'
[ "$(stale)" = "$before2" ] || fail "job2: DIR changed: '$before2' -> '$(stale)'"
[ ! -e "$store/job-a_b" ] || fail "job2: job-a_b left behind"
rm -r "$store/job-t1"
echo "ok: job subfolders used and removed (DIR: $before)"

# Progress and rows from rank 0 only.
[ -s "$tmp/out.job1.0" ] || fail "rank 0 printed no table"
[ "$(grep -c '^ *[0-9]' "$tmp/out.job1.0")" -eq 2 ] || fail "rank 0: not 2 rows"
[ "$(grep -c 'bytes done' "$tmp/err.job1.0")" -eq 2 ] || fail "rank 0: not 2 progress lines"
for f in out err; do
	[ ! -s "$tmp/$f.job1.1" ] || fail "rank 1 printed to std$f"
done
echo "ok: rank 0 alone prints progress"

# No job id: DIR itself, emptied of this job's keys afterwards.
rm "$store/gw%2Fhost%2F1"
run nojob -- --store "$store"
grep -q 'no job id.*--job ID' "$tmp/err.nojob.0" || fail "rank 0 did not say there is no job id"
[ ! -s "$tmp/err.nojob.1" ] || fail "rank 1 printed to stderr"
[ "$(stale)" = "keep " ] || fail "nojob: DIR holds '$(stale)', want 'keep '"
run nojob-again -- --store "$store"
[ "$(stale)" = "keep " ] || fail "nojob-again: DIR holds '$(stale)'"
echo "ok: without a job id, DIR itself, its keys removed at the end"
