#!/usr/bin/env bash
# Installs the Debian packages slowmedia needs to build, test and benchmark.
# Idempotent: asks apt only for what is missing.
set -euo pipefail

pkgs=(build-essential pkg-config meson ninja-build
      libfuse3-dev fuse3 libglib2.0-dev libev-dev check libmount-dev
      e2fsprogs util-linux attr acl kmod psmisc procps systemd
      fio dbench bonnie++ fusefat dosfstools mtools python3 python3-matplotlib)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
