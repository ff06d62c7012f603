#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# auto-rate.sh PERF - GRADWIRE_CODEC=auto follows a link whose rate changes.
#
# Two network namespaces joined by a veth pair, one rank of gradwire-perf
# in each (GRADWIRE_HOST_ID distinct, GRADWIRE_IFACE the veth, a shared
# store folder), allreduce of 4 MiB with GRADWIRE_CODEC=auto:int8,fp16,none
# and --trace. While it runs, the link goes from unshaped to 50 Mbit/s (tc
# tbf on both ends) and back (the qdisc removed), each change made once the
# trace shows enough calls at the old rate. Asserted from the trace: the
# codec of the link changes within 10 calls after each change (once tc has
# returned), every call completes (the run exits 0 with every call
# traced), and the replicas are bit-identical after every call. The trace
# is printed (docs/performance.md quotes one). The namespaces' addresses (10.77.76.0/24) have no route
# elsewhere; everything is removed on exit. Skips (77) when not root or
# without ip/tc/network namespaces.
set -euo pipefail
SKIP=77 # meson's "skipped"
perf=$1
SIZE=${AUTO_RATE_SIZE:-4M}
ITERS=${AUTO_RATE_ITERS:-160}
BEFORE=${AUTO_RATE_BEFORE:-30} # calls at the full rate before shaping
SHAPED=${AUTO_RATE_SHAPED:-25} # calls at 50 Mbit/s before unshaping
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces, tc)"; exit $SKIP; }
for t in ip tc python3; do
	command -v $t >/dev/null || { echo "SKIP: no $t"; exit $SKIP; }
done
A=gwR$$a B=gwR$$b VA=gwr$$a VB=gwr$$b
store=$(mktemp -d)
pids=()
cleanup() {
	# AUTO_RATE_KEEP=DIR keeps the ranks' output (scripts/bench-link).
	[ -z "${AUTO_RATE_KEEP:-}" ] || cp "$store"/out.* "$store"/err.* "$AUTO_RATE_KEEP"/ 2>/dev/null || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
	rm -rf "$store"
}
trap cleanup EXIT
ip netns add $A 2>/dev/null || { echo "SKIP: cannot create a network namespace"; exit $SKIP; }
ip netns add $B
ip link add $VA netns $A type veth peer name $VB netns $B
ip -n $A addr add 10.77.76.1/24 dev $VA
ip -n $B addr add 10.77.76.2/24 dev $VB
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set $VA up
ip -n $B link set $VB up
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

for r in 0 1; do
	if [ $r -eq 0 ]; then ns=$A dev=$VA; else ns=$B dev=$VB; fi
	ip netns exec $ns env RANK=$r WORLD_SIZE=2 FI_TCP_IFACE=$dev FI_NET_IFACE=$dev \
		GRADWIRE_IFACE=$dev GRADWIRE_HOST_ID=$ns GRADWIRE_LOG=${GRADWIRE_LOG:-info} \
		GRADWIRE_CODEC=${AUTO_RATE_CODEC:-auto:int8,fp16,none} \
		timeout 170 "$perf" --store "$store" -b $SIZE -e $SIZE -w 6 -i $ITERS --trace \
		--timeout-s 160 > "$store/out.$r" 2> "$store/err.$r" &
	pids+=($!)
done

# The last call the trace shows (-1: none yet).
last_call() {
	local l
	l=$(grep '^# trace: call' "$store/out.0" 2>/dev/null | tail -1 || true)
	[ -n "$l" ] && set -- $l && echo "$4" || echo -1
}
# Wait (60 s at most) until the trace shows call $1; print the last call.
wait_call() {
	local c
	for _ in $(seq 600); do
		c=$(last_call)
		[ "$c" -ge "$1" ] && break
		kill -0 "${pids[0]}" 2>/dev/null || break
		sleep 0.1
	done
	last_call
}
c1=$(wait_call $BEFORE)
for ns in $A $B; do
	dev=$VA
	[ $ns = $B ] && dev=$VB
	tc -n $ns qdisc add dev $dev root tbf rate 50mbit burst 64kb latency 200ms
done
c1b=$(last_call)
echo "shaped to 50 Mbit/s after call $c1 (trace at $c1b when done)"
c2=$(wait_call $((c1b + SHAPED)))
tc -n $A qdisc del dev $VA root
tc -n $B qdisc del dev $VB root
c2b=$(last_call)
echo "unshaped after call $c2 (trace at $c2b when done)"
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
pids=()
cat "$store/out.0"
grep -h "auto:" "$store"/err.* | grep -v "bytes done" | head -40 || true
if [ $fail -ne 0 ]; then
	echo "FAIL: a rank failed"
	cat "$store"/err.*
	exit 1
fi
python3 - "$store/out.0" "$ITERS" "$c1" "$c1b" "$c2" "$c2b" "${AUTO_RATE_SLOW:-int8}" <<'PY'
import re, sys
path, iters = sys.argv[1], int(sys.argv[2])
c1, c1b, c2, c2b = (int(x) for x in sys.argv[3:7])
calls = []
for l in open(path):
    m = re.match(r"# trace: call (\d+) ([\d.]+) ms, links (.*), identical (\S+)", l)
    if m:
        links = tuple(m.group(3).split()[1::2])
        calls.append((int(m.group(1)), float(m.group(2)), links, m.group(4)))
assert [c[0] for c in calls] == list(range(iters)), \
    f"{len(calls)} calls traced, want {iters} (a call failed)"
bad = [c[0] for c in calls if c[3] != "yes"]
assert not bad, f"replicas differ after calls {bad}"
assert 0 <= c1 <= c1b < c2 <= c2b < iters - 1, f"the changes came at calls {c1} and {c2} of {iters}"
# A change (tc) begins after call c1 is traced and is whole when tc
# returns, the trace then at c1b: the calls between may have run before,
# during or after it (at 1 ms a call, tc's own time spans several). Within
# 10 calls after c1b the link must have switched (its codec changed after
# c1: an exploration ran, whose trials the trace shows, even when it ends
# on the codec it had) and settled:
# 3 calls in a row with the same codec on each link (each receiver
# chooses its own; on the unshaped link two may differ within noise). At
# 50 Mbit/s every link settles on int8 (a quarter of none's bytes, half of
# fp16's: 0.17 s a call against 0.34 and 0.67) and keeps it to the end of
# those calls.
def settled(at, done, last, want):
    for j in range(at + 1, min(done + 10, last - 2) + 1):
        run = [calls[k][2] for k in range(j, j + 3)]
        moved = any(calls[k][2] != calls[k - 1][2] for k in range(at + 1, j + 1))
        if moved and len(set(run)) == 1 and all(x.startswith(want) for x in run[0]):
            return j, run[0]
    return None, None
slow = sys.argv[7]
for at, done, end, what, want in ((c1, c1b, c2, "to 50 Mbit/s", slow),
                                  (c2, c2b, iters - 1, "back to unshaped", "")):
    j, codec = settled(at, done, end, want)
    seen = " ".join("/".join(x.split(":")[0] for x in c[2]) for c in calls[at:done + 14])
    assert j is not None, (f"the change {what} after call {at} (whole by call {done}): no "
                           f"switch settled within 10 calls; calls {at}..: {seen}")
    print(f"change {what} after call {at} (whole by call {done}): {' '.join(calls[at][2])} "
          f"-> {' '.join(codec)} from call {j} "
          f"({j - done} calls after it was whole, settled by call {j + 2})")
    if what == "to 50 Mbit/s":
        assert all(x.startswith(slow) for x in calls[end][2]), \
            f"50 Mbit/s: the link carries {calls[end][2]} at call {end}, not {slow}"
print(f"ok: {iters} calls, replicas identical at every call")
PY
