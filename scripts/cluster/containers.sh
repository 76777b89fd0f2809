#!/usr/bin/env bash
# cluster/containers.sh - the local cluster's container configuration (run by scripts/local-cluster.sh).
#
#   scripts/cluster/containers.sh CONF_DIR    exit 0: a file changed (restart slurmd/slurmctld);
#                                             exit 1: nothing changed
#
# Writes what is installed (scripts/install-containers.sh), removes what is not:
#   plugstack.conf  loads pyxis (srun --container-image), or plugstack.conf.d/pyxis.conf where Debian's
#                   plugstack.conf includes that folder; `optional`: a broken plugin must not stop
#                   every srun of the cluster
#   oci.conf        Slurm's own OCI support (srun --container BUNDLE) through runc (oci-run.sh)
# Each file carries MARKER; a file without it is the administrator's and is left alone.
set -euo pipefail
CONF_DIR=${1:?usage: containers.sh CONF_DIR}
MARKER="# Written by hpctrain scripts/cluster/containers.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
PYXIS_PLUGIN=/usr/local/lib/slurm/spank_pyxis.so
changed=1

# put FILE < content: write when the content differs; remove FILE when content is empty.
put() {
    local dest="$CONF_DIR/$1" content
    content=$(cat)
    if [ -f "$dest" ] && ! grep -qxF "$MARKER" "$dest"; then
        return 0
    fi
    if [ -z "$content" ]; then
        [ -f "$dest" ] || return 0
        rm -f "$dest"
    else
        [ "$(cat "$dest" 2>/dev/null)" != "$content" ] || return 0
        printf '%s\n' "$content" >"$dest.tmp"
        chmod 644 "$dest.tmp"
        mv -f "$dest.tmp" "$dest"
    fi
    echo "containers.sh: $dest updated" >&2
    changed=0
}

# Debian's plugstack.conf includes plugstack.conf.d/*.conf: pyxis goes there when it does.
plugstack=plugstack.conf
if grep -qs '^include .*plugstack.conf.d/' "$CONF_DIR/plugstack.conf"; then plugstack=plugstack.conf.d/pyxis.conf; fi
if [ -f "$PYXIS_PLUGIN" ] && command -v enroot >/dev/null; then
    # container_scope=job: a named container (hpctrain names one per job) is removed when the job ends.
    put "$plugstack" < <(printf '%s\noptional %s container_scope=job\n' "$MARKER" "$PYXIS_PLUGIN")
else
    put "$plugstack" </dev/null
fi

# runc as root, its state under /run; the container id is unique per node, job, step and task.
# oci-run.sh adds what Slurm 22.05 leaves out of the task's environment. Not crun: crun 1.8.1
# (bookworm) refuses a host whose cgroups are in hybrid mode ("cgroups in hybrid mode not supported,
# drop all controllers from cgroupv2"), as this machine's are.
if command -v runc >/dev/null; then
    run="runc --root=/run/hpctrain-oci"
    id="%n.%u.%j.%s.%t"
    put oci.conf <<CONF
$MARKER
RunTimeQuery="$run state $id"
RunTimeKill="$run kill -a $id"
RunTimeDelete="$run delete --force $id"
RunTimeRun="$HERE/oci-run.sh %n %b $id"
CONF
else
    put oci.conf </dev/null
fi
exit "$changed"
