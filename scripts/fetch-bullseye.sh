#!/bin/sh
# A Debian bullseye root file system (Python 3.9.2: the closest this archive has to RHEL 9's
# platform Python 3.9), made with debootstrap once and kept in a cache, for the tests that run
# the product under a system python3 other than the development one (the installed tree, the
# container image's base).
#
#   sh scripts/fetch-bullseye.sh VARIANT      prints the rootfs path on stdout
#
# VARIANT:
#   python   minbase + python3 only (a container image base: the image brings its own
#            dependencies in one folder)
#   deps     minbase + python3 and the distribution packages of the dependencies
#            (python3-click 7.1.2, python3-yaml 5.3.1, python3-jsonschema 3.2.0,
#            python3-psutil 5.8.0, python3-protobuf 3.12.4): RHEL 9's versions or older
#   pip      minbase + python3 and pip 20.3 (the container image's build stage: pip installs the
#            application and its dependencies into one folder for a Python 3.9 base)
#
# CACHE (env BULLSEYE_CACHE, default /var/cache/mixed-cpus-hook-test/bullseye): VARIANT/ holds
# the rootfs once complete (made in VARIANT.new and renamed, so a killed run leaves no half
# tree behind). Needs root and debootstrap (scripts/install-deps.sh installs it); about one
# minute and 60 MB of downloads the first time, nothing afterwards.
set -eu
VARIANT=${1:-}
CACHE=${BULLSEYE_CACHE:-/var/cache/mixed-cpus-hook-test/bullseye}
MIRROR=${BULLSEYE_MIRROR:-http://deb.debian.org/debian}
case "$VARIANT" in
    python) INCLUDE=python3 ;;
    deps) INCLUDE=python3,python3-click,python3-yaml,python3-jsonschema,python3-psutil,python3-protobuf ;;
    pip) INCLUDE=python3,python3-pip ;;
    *) echo "usage: $0 python|deps|pip" >&2; exit 2 ;;
esac
ROOT="$CACHE/$VARIANT"
if [ -x "$ROOT/usr/bin/python3" ] && [ -f "$ROOT/.complete" ]; then
    echo "$ROOT"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "fetch-bullseye: need root (debootstrap)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "fetch-bullseye: debootstrap is not installed (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$CACHE/debs"
rm -rf "$ROOT.new"
echo "fetch-bullseye: debootstrap bullseye ($VARIANT) into $ROOT" >&2
if ! debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$CACHE/debs" bullseye "$ROOT.new" "$MIRROR" \
        >"$CACHE/$VARIANT.log" 2>&1; then
    tail -20 "$CACHE/$VARIANT.log" >&2
    rm -rf "$ROOT.new"
    exit 1
fi
# Nothing of apt's download cache in the tree (it becomes an image layer).
rm -rf "$ROOT.new/var/cache/apt/archives/"*.deb "$ROOT.new/var/lib/apt/lists/"*
touch "$ROOT.new/.complete"
rm -rf "$ROOT"
mv "$ROOT.new" "$ROOT"
echo "$ROOT"
