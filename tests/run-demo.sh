#!/usr/bin/env bash
# The main job: install what is missing, build, then run the seed benchmark in
# quick mode (emulated slow media, raw kernel vs mitigation vs slowmedia).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
	echo "run-demo: run as root (it creates loop devices, mounts and blkio rules)" >&2
	exit 1
fi
bash "$top/tests/install-deps.sh"
bash "$top/tests/build.sh"
exec "$top/tests/bench/run" --quick --json "$top/build/bench-results.json" "$@"
