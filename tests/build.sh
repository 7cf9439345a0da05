#!/usr/bin/env bash
# Configures (once) and builds slowmedia into ./build. Extra args go to meson setup.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
werror=false
[ -n "${CI:-}" ] && werror=true
if [ ! -f build/build.ninja ]; then
	meson setup build -Dwerror=$werror "$@" >/dev/null
else
	meson configure build -Dwerror=$werror >/dev/null
fi
# ninja prints compiler errors on stdout: keep them when the build fails.
if ! out=$(ninja -C build 2>&1); then
	printf '%s\n' "$out" >&2
	echo "build: the build failed" >&2
	exit 1
fi
