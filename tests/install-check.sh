#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/install-check.sh BUILD - install BUILD (already built) into a fresh
# folder with `meson install --destdir`, then use only what was installed,
# from another folder, as a user would:
#   - every file a user needs is there: libgradwire.so.0 (and its soname),
#     the headers, gradwire.pc, the tools, the Python package with its
#     generated _install.py, the examples; the Gloo device, its headers and
#     gradwire-gloo.pc when the build has it;
#   - /usr/bin/python3 imports gradwire.torch from the installed
#     site-packages and loads the installed library, without GW_LIB or
#     LD_LIBRARY_PATH;
#   - the installed examples/ddp_train.py trains on 2 processes over loopback;
#   - the installed examples/allreduce.c builds with
#     `cc $(pkg-config --cflags --libs gradwire)` and runs on 2 ranks.
# No path of the source tree or the build folder is on any search path.
# Prints each check; exits 1 on any miss, 77 (with the reason) when
# something it needs to run is absent (python3-torch, cc, pkg-config).
set -uo pipefail

SKIP=77
build=$(cd "${1:?usage: install-check.sh BUILD}" && pwd)
py=/usr/bin/python3
fails=0

ok() { echo "install-check: ok    $*"; }
bad() { echo "install-check: FAIL  $*"; fails=$((fails + 1)); }
skip() { echo "install-check: SKIP  $*"; exit $SKIP; }
has() { if [ -e "$1" ]; then ok "$2"; else bad "$2 (missing: $1)"; fi; }

for tool in cc pkg-config readelf "$py"; do
	command -v "$tool" >/dev/null || skip "$tool is not installed (Debian: build-essential, pkg-config)"
done
"$py" -c 'import torch.distributed' 2>/dev/null ||
	skip "$py cannot import torch.distributed (Debian: apt-get install python3-torch)"

tmp=$(mktemp -d /tmp/gw-install-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
mkdir -p "$tmp/work"

# The build's install directories (absolute, under the prefix): sets
# libdir, includedir, bindir and datadir.
libdir='' includedir='' bindir='' datadir=''
eval "$("$py" - "$build" <<'EOF'
import json, subprocess, sys
opts = json.loads(subprocess.run(["meson", "introspect", sys.argv[1], "--buildoptions"],
                                 check=True, capture_output=True, text=True).stdout)
o = {x["name"]: x["value"] for x in opts}
for k in ("libdir", "includedir", "bindir", "datadir"):
    v = o[k] if o[k].startswith("/") else o["prefix"] + "/" + o[k]
    print(f"{k}='{v}'")
EOF
)" || { bad "meson introspect $build --buildoptions"; exit 1; }

echo "install-check: meson install -C $build --destdir $root"
if ! meson install -C "$build" --destdir "$root" --no-rebuild >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	bad "meson install"
	exit 1
fi
installed=$(meson introspect "$build" --installed)

lib=$root$libdir
inc=$root$includedir
bin=$root$bindir
doc=$root$datadir/doc/gradwire
has "$lib/libgradwire.so.0" "libgradwire.so.0 in $libdir"
has "$lib/libgradwire.so" "libgradwire.so (the link-time name) in $libdir"
soname=$(readelf -d "$lib/libgradwire.so.0" 2>/dev/null | sed -n 's/.*soname: \[\(.*\)\]/\1/p')
[ "$soname" = libgradwire.so.0 ] && ok "soname libgradwire.so.0" ||
	bad "soname of libgradwire.so.0 is '$soname'"
for h in gradwire.h codec.h plugin.h; do
	has "$inc/gradwire/$h" "header gradwire/$h"
done
has "$lib/pkgconfig/gradwire.pc" "gradwire.pc"
for t in gradwire-perf gradwire-codec-bench; do
	[ -x "$bin/$t" ] && ok "tool $t" || bad "tool $t (missing or not executable: $bin/$t)"
done
has "$doc/LICENSE" "LICENSE"
has "$doc/examples/allreduce.c" "examples/allreduce.c"
has "$doc/examples/ddp_train.py" "examples/ddp_train.py"
has "$doc/examples/elastic_train.py" "examples/elastic_train.py"
if echo "$installed" | grep -q libgradwire_gloo; then
	has "$lib/libgradwire_gloo.so.0" "Gloo device libgradwire_gloo.so.0"
	has "$inc/gradwire/gloo.h" "header gradwire/gloo.h"
	has "$lib/pkgconfig/gradwire-gloo.pc" "gradwire-gloo.pc"
	if echo "$installed" | grep -q libgradwire_gloo_torch; then
		has "$lib/libgradwire_gloo_torch.so" "its PyTorch registration libgradwire_gloo_torch.so"
	fi
else
	echo "install-check: note  this build has no Gloo device (gloo=disabled or Gloo not found)"
fi
# The Python package: wherever the build put it (the interpreter's site-packages).
site=$(echo "$installed" | "$py" -c '
import json, sys
for dst in json.load(sys.stdin).values():
    if dst.endswith("/gradwire/_install.py"):
        print(dst[:-len("/gradwire/_install.py")])')
if [ -z "$site" ]; then
	bad "Python package: the build installs no gradwire/_install.py (configured with -Dpython=none?)"
	echo "install-check: $fails check(s) failed"
	exit 1
fi
for f in __init__ lib torch _install; do
	has "$root$site/gradwire/$f.py" "Python package: gradwire/$f.py in $site"
done

# From here on only the installed files: another folder, no GW_LIB, no
# source or build path on PATH, PYTHONPATH or LD_LIBRARY_PATH.
cd "$tmp/work" || exit 1
clean_env=(env -u GW_LIB -u LD_LIBRARY_PATH -u PYTHONPATH -u PKG_CONFIG_PATH
	PATH=/usr/local/bin:/usr/bin:/bin OMP_NUM_THREADS=1
	FI_TCP_IFACE=lo FI_NET_IFACE=lo GLOO_SOCKET_IFNAME=lo GRADWIRE_PROVIDER_LOCAL=main)

# 1. import gradwire.torch; the library it loads must be the installed one,
#    found through _install.py (no LD_LIBRARY_PATH here).
out=$("${clean_env[@]}" PYTHONPATH="$root$site" "$py" -c '
import gradwire, gradwire.lib, gradwire.torch
print(gradwire.__file__)
print(gradwire.lib.load().path)' 2>&1)
pkgfile=$(echo "$out" | sed -n 1p)
libpath=$(echo "$out" | sed -n 2p)
if [ "$pkgfile" = "$root$site/gradwire/__init__.py" ] &&
	[ "$(readlink -f "$libpath")" = "$(readlink -f "$lib/libgradwire.so.0")" ]; then
	ok "python3: import gradwire.torch from $site loads $libpath (no GW_LIB)"
else
	bad "python3: import gradwire.torch should come from $root$site and load $lib/libgradwire.so.0; got:"
	echo "$out" | sed 's/^/    /'
fi

# 2. examples/ddp_train.py on 2 processes for a few steps (again without
#    LD_LIBRARY_PATH: the package finds the library itself).
if timeout 300 "${clean_env[@]}" PYTHONPATH="$root$site" \
	"$py" "$doc/examples/ddp_train.py" --spawn 2 --steps 6 --log-every 2 --codec int8 \
	>"$tmp/ddp.log" 2>&1 && grep -q "bytes a step on the wire" "$tmp/ddp.log" &&
	grep -q "'int8" "$tmp/ddp.log"; then
	sed 's/^/    /' "$tmp/ddp.log"
	ok "examples/ddp_train.py --spawn 2 --codec int8 trained 6 steps over int8 links"
else
	sed 's/^/    /' "$tmp/ddp.log"
	bad "examples/ddp_train.py --spawn 2 (exit status or output above)"
fi

# 3. examples/allreduce.c through pkg-config, on 2 ranks. The .pc files say
#    the prefix; the sysroot maps it into the destdir.
pc=("${clean_env[@]}" PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root")
flags=$("${pc[@]}" pkg-config --cflags --libs gradwire 2>&1)
echo "install-check: pkg-config --cflags --libs gradwire: $flags"
# shellcheck disable=SC2086 # the flags are words
if "${pc[@]}" cc -o allreduce "$doc/examples/allreduce.c" $flags >"$tmp/cc.log" 2>&1; then
	ok "examples/allreduce.c builds with cc \$(pkg-config --cflags --libs gradwire)"
	mkdir rdv
	run=("${clean_env[@]}" LD_LIBRARY_PATH="$lib" timeout 120 ./allreduce)
	"${run[@]}" 0 2 rdv >r0.log 2>&1 &
	p0=$!
	"${run[@]}" 1 2 rdv >r1.log 2>&1
	s1=$?
	wait $p0
	s0=$?
	cat r0.log r1.log | sed 's/^/    /'
	if [ $s0 -eq 0 ] && [ $s1 -eq 0 ] && grep -q "x\[0\] = 3," r0.log && grep -q "x\[0\] = 3," r1.log; then
		ok "examples/allreduce.c on 2 ranks summed to 3 on both"
	else
		bad "examples/allreduce.c on 2 ranks (exit $s0 and $s1)"
	fi
else
	sed 's/^/    /' "$tmp/cc.log"
	bad "examples/allreduce.c does not build through pkg-config"
fi
if echo "$installed" | grep -q gradwire-gloo.pc; then
	gflags=$("${pc[@]}" pkg-config --libs gradwire-gloo 2>&1) &&
		echo "$gflags" | grep -q -- -lgradwire_gloo &&
		ok "pkg-config --libs gradwire-gloo: $gflags" ||
		bad "pkg-config --libs gradwire-gloo: $gflags"
fi

if [ $fails -gt 0 ]; then
	echo "install-check: $fails check(s) FAILED"
	exit 1
fi
echo "install-check: every check passed"
