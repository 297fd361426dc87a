#!/bin/sh
# Fetch Debian sid's kubectl (package kubectl; kubernetes-client only depends on it) into a cache for the deployment tests
# (`kubectl kustomize deploy/...`), without changing the system's apt sources
# (scripts/fetch-debian.sh). Prints the kubectl path on stdout.
#
# CACHE: env KUBECTL_CACHE, default /var/cache/mixed-cpus-hook-test/kubectl. Idempotent.
set -eu
CACHE=${KUBECTL_CACHE:-/var/cache/mixed-cpus-hook-test/kubectl}
sh "$(dirname "$0")/fetch-debian.sh" sid "$CACHE" kubectl usr/bin/kubectl
echo "$CACHE/root/usr/bin/kubectl"
