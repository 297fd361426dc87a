#!/bin/sh
# cpu-split.sh: how a mixed container learns its CPU split in hook mode (no env variables there).
# shared = the node's shared-CPU file, mounted read-only into the container (default path below);
# exclusive = this process's Cpus_allowed_list minus shared. Prints two lines to eval:
#   OPENSHIFT_ISOLATED_CPUS=2-3
#   OPENSHIFT_SHARED_CPUS=0-1
# POSIX sh and busybox only. Usage: eval "$(cpu-split.sh [SHARED_FILE])"
set -eu
file=${1:-/etc/mixed-cpus-hook/shared-cpus}
expand() {  # cpulist -> one CPU per line
    tr ',' '\n' | while IFS=- read -r lo hi; do
        [ -n "$lo" ] || continue
        i=$lo; while [ "$i" -le "${hi:-$lo}" ]; do echo "$i"; i=$((i + 1)); done
    done
}
compress() {  # sorted CPUs, one per line -> cpulist
    awk 'NR==1{lo=$1;hi=$1;next} $1==hi+1{hi=$1;next} {printf "%s%s,", lo, (hi>lo?"-"hi:""); lo=$1; hi=$1}
         END{if (NR) printf "%s%s", lo, (hi>lo?"-"hi:""); print ""}'
}
shared=$(grep -v '^[[:space:]]*#' "$file" | tr -d ' \t' | tr '\n' ',' | expand | sort -n -u)
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | expand | sort -n -u)
exclusive=$(printf '%s\n' "$allowed" | grep -vxF -e "$(printf '%s\n' "$shared")" || true)
echo "OPENSHIFT_ISOLATED_CPUS=$(printf '%s\n' "$exclusive" | grep . | compress)"
echo "OPENSHIFT_SHARED_CPUS=$(printf '%s\n' "$shared" | grep . | compress)"
