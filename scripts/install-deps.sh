#!/bin/sh
# Install what the test suite needs on a Debian 12 machine (root): the real runtimes and
# tools the integration tests drive. Idempotent; skips apt when everything is present.
set -eu
PKGS="debootstrap buildah runc crun podman busybox-static strace zsh qemu-system-x86 linux-image-amd64 rpm rpmlint inotify-tools hyperfine systemd util-linux cpio python3-pip python3-setuptools python3-wheel"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: need root to install:$missing" >&2
        exit 1
    fi
    echo "install-deps: installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
sh "$(dirname "$0")/fetch-containerd.sh" 1.7
sh "$(dirname "$0")/fetch-containerd.sh" 2.1
sh "$(dirname "$0")/fetch-kubectl.sh" >/dev/null
