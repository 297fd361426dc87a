#!/bin/sh
# Fetch binary packages of another Debian suite (trixie, sid) into a cache, WITHOUT changing the
# system's apt sources: a private one-line sources list for `SUITE main` (the archive URI of this
# machine's own Debian sources, Debian's archive keyring), a private lists directory,
# `apt-get download` and `dpkg-deb -x` of each package into CACHE/root (made in root.new and
# renamed: a killed run leaves no half tree). CACHE/root/VERSION holds the first package's version.
# The dpkg status is /dev/null: a package installed here from elsewhere (a cloud SDK's kubectl)
# must not stand in for the suite's candidate.
# Idempotent: does nothing when every CHECK path (relative to CACHE/root) is an executable.
#
#   sh scripts/fetch-debian.sh SUITE CACHE "PACKAGE..." "CHECK..."
#
# Used by fetch-containerd.sh (containerd 1.7 from trixie, 2.1 from sid) and fetch-kubectl.sh.
set -eu
[ $# -eq 4 ] || { echo "usage: $0 SUITE CACHE 'PACKAGE...' 'CHECK...'" >&2; exit 2; }
SUITE=$1 CACHE=$2 PACKAGES=$3 CHECKS=$4
ME="fetch-debian ($SUITE: $PACKAGES)"
complete=yes
for c in $CHECKS; do
    [ -x "$CACHE/root/$c" ] || complete=no
done
[ "$complete" = yes ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "$ME: need root (apt-get update into a private lists dir)" >&2
    exit 1
fi
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$KEYRING" ] || { echo "$ME: $KEYRING missing (Debian package debian-archive-keyring)" >&2; exit 1; }

# The archive URI of this machine's own Debian "main" sources (deb822 or one-line format).
uri=""
for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    uri=$(awk 'tolower($1)=="uris:" && $2 ~ /\/debian\/?$/ {print $2; exit}' "$f")
    [ -n "$uri" ] && break
done
if [ -z "$uri" ]; then
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        uri=$(awk '$1=="deb" {for (i=2;i<=NF;i++) if ($i !~ /^\[/ && $i !~ /\]$/ && $i !~ /=/) {if ($i ~ /\/debian\/?$/) {print $i; exit} else break}}' "$f")
        [ -n "$uri" ] && break
    done
fi
[ -n "$uri" ] || { echo "$ME: no Debian archive URI found in /etc/apt/sources.list*" >&2; exit 1; }

work="$CACHE/apt"
rm -rf "$work"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
echo "deb [signed-by=$KEYRING] $uri $SUITE main" > "$work/sources.list"
set -- -q -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" \
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Get::List-Cleanup=false \
    -o APT::Sandbox::User=root -o Dir::State::status=/dev/null
echo "$ME: into $CACHE" >&2
apt-get "$@" update >/dev/null
# shellcheck disable=SC2086 # PACKAGES is a word list
(cd "$work/debs" && apt-get "$@" download $PACKAGES >/dev/null)
rm -rf "$CACHE/root.new"
mkdir -p "$CACHE/root.new"
first=""
for p in $PACKAGES; do
    deb=$(ls "$work/debs/${p}_"*.deb)
    dpkg-deb -x "$deb" "$CACHE/root.new"
    [ -n "$first" ] || first=$deb
done
dpkg-deb -f "$first" Version > "$CACHE/root.new/VERSION"
for c in $CHECKS; do
    [ -x "$CACHE/root.new/$c" ] || { echo "$ME: $c is not in the packages" >&2; rm -rf "$CACHE/root.new" "$work"; exit 1; }
done
rm -rf "$CACHE/root"
mv "$CACHE/root.new" "$CACHE/root"
rm -rf "$work"
