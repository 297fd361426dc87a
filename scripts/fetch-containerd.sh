#!/bin/sh
# Fetch Debian trixie's containerd 1.7 (with NRI plugin support; bookworm's 1.6 has none) for the
# NRI integration tests, WITHOUT changing the system's apt sources: a private one-line sources
# list for `trixie main` (the archive URI of this machine's own Debian sources, Debian's archive
# keyring), a private lists directory, `apt-get download` and `dpkg-deb -x` into a cache.
# Idempotent: does nothing when the cache already holds the binaries.
#   CACHE (default /var/cache/mixed-cpus-hook-test/containerd): where usr/bin/containerd lands.
set -eu
CACHE=${CONTAINERD_CACHE:-/var/cache/mixed-cpus-hook-test/containerd}
SUITE=trixie
BIN="$CACHE/root/usr/bin"
if [ -x "$BIN/containerd" ] && [ -x "$BIN/containerd-shim-runc-v2" ] && [ -x "$BIN/ctr" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "fetch-containerd: need root (apt-get update into a private lists dir)" >&2
    exit 1
fi
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$KEYRING" ] || { echo "fetch-containerd: $KEYRING missing (Debian package debian-archive-keyring)" >&2; exit 1; }

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
[ -n "$uri" ] || { echo "fetch-containerd: no Debian archive URI found in /etc/apt/sources.list*" >&2; exit 1; }

work="$CACHE/apt"
rm -rf "$work"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
echo "deb [signed-by=$KEYRING] $uri $SUITE main" > "$work/sources.list"
set -- -q -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" \
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Get::List-Cleanup=false \
    -o APT::Sandbox::User=root
echo "fetch-containerd: containerd from $SUITE into $CACHE"
apt-get "$@" update >/dev/null
(cd "$work/debs" && apt-get "$@" download containerd >/dev/null)
deb=$(ls "$work/debs"/containerd_*.deb)
rm -rf "$CACHE/root.new"
mkdir -p "$CACHE/root.new"
dpkg-deb -x "$deb" "$CACHE/root.new"
dpkg-deb -f "$deb" Version > "$CACHE/root.new/VERSION"
rm -rf "$CACHE/root"
mv "$CACHE/root.new" "$CACHE/root"
rm -rf "$work"
"$BIN/containerd" --version
