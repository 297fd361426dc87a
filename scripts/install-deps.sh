#!/bin/sh
# Install what `make test` needs, with apt, on Debian 12 (the CI's distribution and the only one
# this project's tests run on). Root is needed to install; nothing is installed when everything is
# there already. Each group says what it is for, and the script prints what it installs.
#
#   NO_VM=1   leave out the cgroup v2 VM's packages (qemu-system-x86 and the kernel image
#             linux-image-amd64): the VM tests are then skipped, each saying why.
#
# On any other distribution this script installs nothing: it says so and lists the packages to
# install by hand (the README, "Quick start", has the same list).
set -eu

# group name | why | Debian 12 packages
GROUPS_TABLE='runtimes|the integration tests run real containers: runc, crun, podman, a busybox rootfs, buildah for the plugin image, strace for the crash points, inotify for the watches|runc crun podman busybox-static strace inotify-tools util-linux systemd buildah
vm|the cgroup v2 tests boot a throwaway VM under qemu with Debian'"'"'s kernel: linux-image-amd64 is a KERNEL IMAGE installed on this machine (apt adds it to the boot menu; the tests never boot this machine with it)|qemu-system-x86 linux-image-amd64
packaging|make rpm, rpmlint, and the wheel make install builds|rpm rpmlint cpio python3-pip python3-setuptools python3-wheel
system-python|the installed tree runs under the system python3 alone: the distribution packages of the dependencies, and debootstrap for the Debian bullseye (Python 3.9) root file system|python3-click python3-yaml python3-jsonschema python3-psutil python3-protobuf debootstrap
tools|zsh (its completion is tested), hyperfine (benchmarks)|zsh hyperfine'

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: no apt here: this script installs only on Debian 12. Install by hand (Debian names):" >&2
    echo "$GROUPS_TABLE" | while IFS='|' read -r group why pkgs; do
        echo "  $group: $pkgs  ($why)" >&2
    done
    echo "install-deps: then run make test again; a test whose tool is missing is skipped with its reason" >&2
    exit 1
fi

missing=""
while IFS='|' read -r group why pkgs; do
    if [ "$group" = vm ] && [ -n "${NO_VM:-}" ]; then
        echo "install-deps: NO_VM set: not installing $pkgs (the cgroup v2 VM tests will be skipped)"
        continue
    fi
    need=""
    for p in $pkgs; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
    done
    if [ -n "$need" ]; then
        echo "install-deps: $group:$need  ($why)"
        missing="$missing$need"
    fi
done <<TABLE
$GROUPS_TABLE
TABLE

if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: need root to install:$missing" >&2
        exit 1
    fi
    echo "install-deps: apt-get install$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
# containerd 1.7 and 2.1 (NRI) from Debian trixie and sid, kubectl from sid: into private caches, never into the
# system (see the scripts).
sh "$(dirname "$0")/fetch-containerd.sh" 1.7
sh "$(dirname "$0")/fetch-containerd.sh" 2.1
sh "$(dirname "$0")/fetch-kubectl.sh" >/dev/null
