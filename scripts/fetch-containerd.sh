#!/bin/sh
# Fetch a Debian containerd with NRI plugin support for the NRI integration tests (bookworm's 1.6
# has none), without changing the system's apt sources (scripts/fetch-debian.sh):
#
#   sh scripts/fetch-containerd.sh [1.7|2.1]      (default 1.7)
#
#   1.7  trixie's containerd 1.7.24 (NRI 0.6.1; NRI off by default, config version 2)
#   2.1  sid's containerd 2.1.x (NRI 0.8; NRI and CDI on by default, config version 3). sid's runc
#        needs glibc 2.38: the tests run it with the system's runc 1.1.5.
#
# CACHE: env CONTAINERD_CACHE, default /var/cache/mixed-cpus-hook-test/containerd (1.7) or
# /var/cache/mixed-cpus-hook-test/containerd-2.1; usr/bin/containerd lands in CACHE/root.
# Idempotent: does nothing when the cache already holds the binaries.
set -eu
VERSION=${1:-1.7}
case "$VERSION" in
    1.7) SUITE=trixie; DEFAULT=/var/cache/mixed-cpus-hook-test/containerd ;;
    2.1) SUITE=sid; DEFAULT=/var/cache/mixed-cpus-hook-test/containerd-2.1 ;;
    *) echo "usage: $0 [1.7|2.1]" >&2; exit 2 ;;
esac
CACHE=${CONTAINERD_CACHE:-$DEFAULT}
BINS="usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr"
complete=yes
for b in $BINS; do [ -x "$CACHE/root/$b" ] || complete=no; done
[ "$complete" = yes ] && exit 0
sh "$(dirname "$0")/fetch-debian.sh" "$SUITE" "$CACHE" containerd "$BINS"
"$CACHE/root/usr/bin/containerd" --version
