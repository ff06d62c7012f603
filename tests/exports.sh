#!/usr/bin/env bash
# tests/exports.sh LIB INCLUDE_DIR MAP - libgradwire.so exports exactly what
# the public headers declare with GW_API: functions (gw_*, type T) and data
# objects such as the table gradwire_plugin_v1 (type D, R or B), plus the
# version node of gradwire.map (type A), and nothing else; and the version
# script MAP lists exactly those names in its global: section.
set -euo pipefail
SKIP=77	# meson's "skipped"
lib=$1 inc=$2 map=$3
command -v nm >/dev/null || { echo "SKIP: nm (binutils) is not installed"; exit $SKIP; }
syms=$(nm -D --defined-only "$lib" | awk 'NF == 3 { sub(/@.*/, "", $3); print $2, $3 }')
decls=$( (grep -ho 'GW_API[^;]*;\?' "$inc"/gradwire/*.h || true) )

got_fn=$(echo "$syms" | awk '$1 == "T" { print $2 }' | sort)
got_data=$(echo "$syms" | awk '$1 ~ /^[DRB]$/ { print $2 }' | sort)
other=$(echo "$syms" | awk '$1 !~ /^[TDRB]$/ && !($1 == "A" && $2 ~ /^GRADWIRE_/)' || true)
want_fn=$( (echo "$decls" | grep '(' || true) | (grep -o 'gw_[a-z0-9_]*(' || true) |
	tr -d '(' | sort -u)
# A data declaration has no parameter list and ends on its line with the
# name (a function's may continue on the next lines).
want_data=$( (echo "$decls" | grep -v '(' | grep ';$' || true) |
	sed -E 's/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*;$/\1/' | sort -u)

rc=0
if [ "$got_fn" != "$want_fn" ]; then
	echo "exported functions differ from the GW_API declarations:"
	diff <(echo "$want_fn") <(echo "$got_fn") || true
	rc=1
fi
if [ "$got_data" != "$want_data" ]; then
	echo "exported data symbols differ from the GW_API declarations:"
	diff <(echo "$want_data") <(echo "$got_data") || true
	rc=1
fi
# The names between "global:" and "local:", comments stripped.
listed=$(sed -e 's|/\*.*\*/||' "$map" | tr -d '\r' |
	awk '/global:/ { on = 1; next } /local:/ { on = 0 } on' |
	tr -d ' \t;' | grep -v '^$' | sort)
want_all=$(printf '%s\n%s\n' "$want_fn" "$want_data" | grep -v '^$' | sort)
if [ "$listed" != "$want_all" ]; then
	echo "$map lists other symbols than the GW_API declarations:"
	diff <(echo "$want_all") <(echo "$listed") || true
	rc=1
fi
if [ -n "$other" ]; then
	echo "unexpected exported symbols:"
	echo "$other"
	rc=1
fi
[ $rc = 0 ] || exit 1
[ -n "$want_data" ] || { echo "no GW_API data symbol found (gradwire_plugin_v1?)"; exit 1; }
echo "exports: $(echo "$got_fn" | wc -l) GW_API functions, data: $got_data; nothing else; $(basename "$map") lists them all"
