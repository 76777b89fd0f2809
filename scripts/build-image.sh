#!/usr/bin/env bash
# build-image.sh - the container image the container tests train in: a Debian root filesystem with
# Python, CPU torch and hpctrain (with its examples' and watchdog's extras), as
#   $HPCTRAIN_IMAGE_DIR/hpctrain.sqsh   a squashfs image for pyxis/enroot (srun --container-image)
#   $HPCTRAIN_IMAGE_DIR/bundle/         an OCI bundle (config.json + rootfs/) for Slurm's --container
#
#   scripts/build-image.sh [--force]    (root; prints the image folder on its last line)
#
# Cached: rebuilt only when hpctrain's version, this script or the torch pin changes (the stamp file
# holds all three). mmdebstrap makes the root filesystem from Debian's packages; pip installs torch
# and hpctrain into it from the host's wheels (no chroot, no network beyond apt), so the image's
# torch is the host's CPU build. The image's Python is Debian's: torch's cp3XX wheel must match it.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON="${PYTHON:-python3}"
TORCH_PIN="${HPCTRAIN_TORCH:-torch==2.13.0}"
IMAGE_DIR="${HPCTRAIN_IMAGE_DIR:-/opt/hpctrain-image}"
SUITE="${HPCTRAIN_IMAGE_SUITE:-bookworm}"

version=$(PYTHONPATH="$REPO" "$PYTHON" -c 'import hpctrain; print(hpctrain.__version__)')
stamp="hpctrain $version; torch $TORCH_PIN; suite $SUITE; script $(sha256sum "$0" | cut -d' ' -f1)"
if [ "${1:-}" != --force ] && [ -f "$IMAGE_DIR/hpctrain.sqsh" ] && [ -f "$IMAGE_DIR/bundle/config.json" ] \
    && [ "$(cat "$IMAGE_DIR/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "build-image: up to date ($stamp)"
    echo "$IMAGE_DIR"
    exit 0
fi
for tool in mmdebstrap mksquashfs; do
    command -v "$tool" >/dev/null || { echo "build-image: $tool is missing (apt-get install mmdebstrap squashfs-tools)" >&2; exit 1; }
done

work="$IMAGE_DIR.new"
rm -rf "$work"
mkdir -p "$work/bundle"
rootfs="$work/bundle/rootfs"
start=$SECONDS
# minbase + Python: what a rank needs. No pip in the image: the host's pip fills it below.
mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates,procps "$SUITE" "$rootfs"
echo "build-image: root filesystem in $((SECONDS - start)) s"

site_packages=$(chroot "$rootfs" python3 -c 'import sysconfig; print(sysconfig.get_path("purelib", "posix_local"))')
image_abi=$(chroot "$rootfs" python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
host_abi=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if [ "$image_abi" != "$host_abi" ]; then
    echo "build-image: the image's Python is $image_abi, the host's $host_abi: pick HPCTRAIN_IMAGE_SUITE to match" >&2
    exit 1
fi
# --target: the host's pip and wheel sources (find-links, local indexes) serve the image's Python.
"$PYTHON" -m pip install --quiet --no-warn-script-location --target "$rootfs$site_packages" \
    "$TORCH_PIN" "${REPO}[examples,watchdog]"
rm -rf "${rootfs:?}/var/cache/apt"/*.bin "${rootfs:?}/var/lib/apt/lists"/* "${rootfs:?}$site_packages/bin"
chroot "$rootfs" python3 -c 'import torch, hpctrain, numpy; print("build-image: torch", torch.__version__, "hpctrain", hpctrain.__version__)'
echo "build-image: Python packages in $((SECONDS - start)) s"

# lz4: the fastest to pack and to unpack (enroot unpacks the image on every node at each job start).
mksquashfs "$rootfs" "$work/hpctrain.sqsh" -comp lz4 -noappend -quiet -no-progress >/dev/null
# The OCI bundle: the same root filesystem and a runtime spec from crun/runc, changed to what ranks
# need (docs/containers.md): the host's network, hostname and process ids (rendezvous by node name, the
# watchdog's stacks), its /dev/shm (the heartbeat slots) and /etc/hosts; a read-only root. A job adds
# the mount of its run directory in a bundle of its own (its config.json naming this rootfs).
( cd "$work/bundle" && if command -v crun >/dev/null; then crun spec; else runc spec; fi )
"$PYTHON" - "$work/bundle/config.json" <<'PY'
import json
import sys

path = sys.argv[1]
with open(path, encoding="utf-8") as handle:
    spec = json.load(handle)
spec["root"] = {"path": "rootfs", "readonly": True}
spec["process"]["terminal"] = False
spec.pop("hostname", None)
host_shared = {"network", "uts", "ipc", "pid", "cgroup"}
spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"] if n["type"] not in host_shared]
spec["mounts"] = [m for m in spec["mounts"] if m["destination"] not in ("/dev/shm",)]
spec["mounts"] += [
    {"destination": "/dev/shm", "type": "bind", "source": "/dev/shm", "options": ["rbind", "rw"]},
    {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["bind", "ro"]},
    # The root is read-only: Python's tempfile (torchrun's log folder) needs a writable /tmp.
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
]
with open(path, "w", encoding="utf-8") as handle:
    json.dump(spec, handle, indent=2)
PY
echo "$stamp" >"$work/stamp"
rm -rf "$IMAGE_DIR"
mv "$work" "$IMAGE_DIR"
echo "build-image: built in $((SECONDS - start)) s: $(du -sh "$IMAGE_DIR/hpctrain.sqsh" | cut -f1) squashfs"
echo "$IMAGE_DIR"
