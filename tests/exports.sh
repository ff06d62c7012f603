#!/usr/bin/env bash
# tests/exports.sh LIB INCLUDE_DIR - libgradwire.so exports exactly the
# functions the public headers declare with GW_API, and nothing else.
set -euo pipefail
lib=$1 inc=$2
command -v nm >/dev/null || { echo "SKIP: nm (binutils) is not installed"; exit 77; }
got=$(nm -D --defined-only "$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort)
want=$( (grep -ho 'GW_API[^;]*' "$inc"/gradwire/*.h || true) | (grep -o 'gw_[a-z0-9_]*(' || true) | tr -d '(' | sort -u)
if [ "$got" != "$want" ]; then
	echo "exported symbols differ from the GW_API declarations:"
	diff <(echo "$want") <(echo "$got") || true
	exit 1
fi
echo "exports: $(echo "$got" | wc -l) GW_API functions, nothing else"
