#!/usr/bin/env bash
# Install the Debian packages goshim needs to build, test and benchmark.
# Silent when everything is present. As root: installs what is missing with
# apt-get. Otherwise: prints the exact command to run and exits 1.
# To add a dependency, add its Debian package name to PACKAGES.
set -euo pipefail

PACKAGES="build-essential libcriterion-dev libunwind-dev pkg-config clang-format valgrind strace gnuplot-nox file gdb golang-go universal-ctags python3 libglib2.0-tests libpython3.11-testsuite stress-ng"
# The real programs scripts/bench_real.sh times (make bench): real_package_list in
# scripts/real_cases.sh, whose scripts install them too when run alone.
PACKAGES+=" pigz xz-utils zstd pbzip2 lbzip2 coreutils sysbench ripgrep memcached redis-server
          redis-tools mariadb-server mariadb-client g++ procps util-linux nodejs"

missing=()
for pkg in $PACKAGES; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [ "$status" != "install ok installed" ]; then
        missing+=("$pkg")
    fi
done

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}"
else
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run this, then retry:" >&2
    echo "sudo apt-get install -y ${missing[*]}"
    exit 1
fi
