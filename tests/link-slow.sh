#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# link-slow.sh PERF - a 4 MiB allreduce over a 10 Mbit/s link.
#
# Two network namespaces joined by a veth pair, each end shaped with tc's
# token bucket to 10 Mbit/s (about 3.4 s of data each way for this call),
# one rank of gradwire-perf in each, default provider. The allreduce must
# complete, exact and with identical replicas (--check), well within its
# GRADWIRE_TIMEOUT_MS, and the time must show that the link was the limit.
# The namespaces' addresses (10.77.74.0/24) have no route elsewhere;
# everything is removed on exit. Skips (77) when not root or without ip/tc.
set -euo pipefail
SKIP=77	# meson's "skipped"
perf=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces, tc)"; exit $SKIP; }
for t in ip tc; do
	command -v $t >/dev/null || { echo "SKIP: no $t (iproute2)"; exit $SKIP; }
done
A=gwS$$a B=gwS$$b VA=gws$$a VB=gws$$b
store=$(mktemp -d)
cleanup() {
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
	rm -rf "$store"
}
trap cleanup EXIT
ip netns add $A || { echo "SKIP: cannot create a network namespace"; exit $SKIP; }
ip netns add $B
ip link add $VA netns $A type veth peer name $VB netns $B
ip -n $A addr add 10.77.74.1/24 dev $VA
ip -n $B addr add 10.77.74.2/24 dev $VB
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set $VA up
ip -n $B link set $VB up
tc -n $A qdisc add dev $VA root tbf rate 10mbit burst 32kb latency 400ms
tc -n $B qdisc add dev $VB root tbf rate 10mbit burst 32kb latency 400ms
# A new link takes a moment before libfabric lists it (10 s at most).
# libfabric's native TCP provider: net before 1.18, tcp after.
tcp=$(fi_info -l 2>/dev/null | grep -x 'net:' >/dev/null && echo net || echo tcp)
seen() { ip netns exec "$1" fi_info -p "$tcp" 2>/dev/null | grep -q "domain: $2\$"; }
for pair in "$A $VA" "$B $VB"; do
	set -- $pair
	for _ in $(seq 50); do
		seen "$1" "$2" && break
		sleep 0.2
	done
	seen "$1" "$2" || { echo "FAIL: libfabric does not list $2 in $1"; exit 1; }
done

t0=$(date +%s%N)
pids=()
# The namespaces share this kernel's host id (and would talk over shm):
# keep every pair of ranks on the network provider, over the link.
for r in 0 1; do
	if [ $r -eq 0 ]; then ns=$A dev=$VA; else ns=$B dev=$VB; fi
	ip netns exec $ns env RANK=$r WORLD_SIZE=2 FI_TCP_IFACE=$dev FI_NET_IFACE=$dev \
		GRADWIRE_IFACE=$dev GRADWIRE_TIMEOUT_MS=20000 \
		GRADWIRE_PROVIDER_LOCAL=main \
		timeout 60 "$perf" --store "$store" -b 4M -e 4M -w 0 -i 1 --check --json \
		> "$store/out.$r" 2> "$store/err.$r" &
	pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ $fail -ne 0 ]; then
	echo "FAIL: the allreduce over 10 Mbit/s did not complete"
	cat "$store"/err.*
	exit 1
fi
line=$(grep '^{' "$store/out.0" | tail -1)
echo "10 Mbit/s, 2 ranks, 4 MiB: $line (whole run $ms ms)"
python3 - "$line" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
# 4 MiB each way at 10 Mbit/s is 3.36 s: a call much faster than that
# did not cross the shaped link; one slower than 3x that wasted it.
assert r["identical"], "replicas differ"
assert r["rel_err"] < 1e-6, f"not exact: {r['rel_err']}"
t = r["time_us"] / 1e6
assert 3.0 < t < 10.0, f"call took {t:.2f} s, want 3.0-10 s at 10 Mbit/s"
# Waiting on a slow link sleeps in the kernel: the busiest rank's CPU in
# the call is a small part of it (a waiter that polled would use it all).
cpu = r["cpu_us"] / 1e6
assert 0 < cpu < t / 4, f"the busiest rank used {cpu:.2f} s of CPU in a {t:.2f} s call"
print(f"ok: {t:.2f} s (link limit 3.36 s), {cpu * 1000:.0f} ms of CPU")
PY
