#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# perf-mpi.sh PERF MPI - gradwire-perf under mpirun, no shared folder: with
# MPI built in (MPI = "yes"), 2 ranks meet through MPI (perf_mpi.c) and run
# int8 and exact allreduces with --check over loopback (net), each rank
# on a host of its own (GRADWIRE_HOST_ID from its MPI rank) so the ranks
# really use the network provider. Passes when both runs exit 0, rank 0
# printed one header and every row with identical replicas, and only rank
# 0 printed progress. Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
perf=$1
[ "${2:-}" = yes ] || { echo "SKIP: gradwire-perf was built without MPI (meson -Dmpi=enabled, libopenmpi-dev)"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(-np 2 --oversubscribe)
[ "$(id -u)" -ne 0 ] || args+=(--allow-run-as-root)
# No store, no launcher variables of another kind; vader without CMA (a
# container may forbid process_vm_readv).
unset RANK WORLD_SIZE SLURM_PROCID SLURM_NTASKS
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# In the sanitizer build, no leak check here: Open MPI leaks in MPI_Init
# from components it unloads at MPI_Finalize, so LeakSanitizer sees them
# as "<unknown module>" and no suppression can name them. gradwire's own
# paths are leak-checked by the other perf tests.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
for codec in int8 none; do
	if ! timeout 100 mpirun "${args[@]}" -x FI_TCP_IFACE=lo -x FI_NET_IFACE=lo \
		-x GRADWIRE_IFACE=lo -x GRADWIRE_PROVIDER_LOCAL=main \
		-x GRADWIRE_TIMEOUT_MS=20000 \
		sh -c 'GRADWIRE_HOST_ID=mpi-$OMPI_COMM_WORLD_RANK exec "$@"' sh \
		"$perf" -b 4K -e 1M -f 16 -w 1 -i 3 --codec "$codec" --min-compress 1K --check \
		--timeout-s 60 > "$tmp/out" 2> "$tmp/err"; then
		echo "FAIL: mpirun $codec exited non-zero"
		cat "$tmp/out" "$tmp/err"
		exit 1
	fi
	cat "$tmp/out"
	rows=$(grep -c '^ *[0-9]' "$tmp/out" || true)
	good=$(grep -E '^ *[0-9].* yes .*'"$codec" "$tmp/out" | grep -vc WRONG || true)
	heads=$(grep -c '^# gradwire-perf: 2 ranks on 2 hosts' "$tmp/out" || true)
	done_lines=$(grep -c 'bytes done' "$tmp/err" || true)
	if [ "$rows" -ne 3 ] || [ "$good" -ne 3 ] || [ "$heads" -ne 1 ] || [ "$done_lines" -ne 3 ]; then
		echo "FAIL: $codec: $rows rows ($good identical, checked), $heads headers, $done_lines progress lines; want 3, 3, 1, 3"
		cat "$tmp/err"
		exit 1
	fi
done
echo "ok: mpirun -np 2, no --store: int8 and none checked, rank 0 alone printed"
