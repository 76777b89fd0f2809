#!/usr/bin/env bash
# install-containers.sh - the container runtimes the container tests use, idempotently (root, Debian):
#   enroot 4.1.2 and pyxis 0.24.0 built from ../shared/vendor/ (pyxis against this Slurm's headers),
#   runc (and crun) for Slurm's OCI support, mmdebstrap and squashfs-tools for scripts/build-image.sh.
#
#   scripts/install-containers.sh     prints one line per runtime: installed, or why not
#
# Nothing here configures Slurm: scripts/cluster/containers.sh writes plugstack.conf and oci.conf when
# these are installed (scripts/local-cluster.sh up). A missing vendor tarball is reported, not fatal:
# the container tests then skip with that reason.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VENDOR="${HPCTRAIN_VENDOR:-$REPO/../shared/vendor}"
ENROOT_VERSION=4.1.2
PYXIS_VERSION=0.24.0
PREFIX=/usr/local
PYXIS_PLUGIN="$PREFIX/lib/slurm/spank_pyxis.so"

say() { echo "install-containers: $*"; }

apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Runtime tools (enroot's own list: jq, parallel, squashfs-tools, zstd, pigz...), build tools, crun,
# and the image builder's. libslurm-dev carries spank.h for the Slurm that is installed.
apt_install gcc make libbsd-dev libslurm-dev makeself jq parallel pigz zstd squashfs-tools \
    fuse-overlayfs squashfuse gawk curl libcap2-bin runc crun mmdebstrap

# build_vendored NAME VERSION PREPARE [MAKE_ARGS...]: `make install` NAME-VERSION.tar.xz from $VENDOR
# into $PREFIX, after running PREPARE (a function, or :) on the unpacked tree. Fails, saying why, when
# the tarball is missing or the build fails.
build_vendored() {
    local name=$1 version=$2 prepare=$3
    shift 3
    local tarball="$VENDOR/$name-$version.tar.xz" work
    [ -f "$tarball" ] || { say "$name not installed: $tarball is missing"; return 1; }
    work=$(mktemp -d)
    tar -xf "$tarball" -C "$work"
    "$prepare" "$work/$name-$version"
    if ! make -s -C "$work/$name-$version" prefix="$PREFIX" "$@" install >"$work/make.log" 2>&1; then
        say "$name not installed: make failed: $(tail -n 1 "$work/make.log")"
        rm -rf "$work"
        return 1
    fi
    rm -rf "$work"
}

# The enroot archive has no git submodules (musl, makeself): it is built against glibc and Debian's
# libbsd, with Debian's makeself.
debian_makeself() {
    mkdir -p "$1/deps/dist/makeself/bin"
    ln -s "$(command -v makeself)" "$1/deps/dist/makeself/bin/enroot-makeself"
}

build_enroot() {
    if [ "$(enroot version 2>/dev/null)" = "$ENROOT_VERSION" ]; then
        say "enroot $ENROOT_VERSION installed"
        return 0
    fi
    build_vendored enroot "$ENROOT_VERSION" debian_makeself -o deps FORCE_GLIBC=1 LDLIBS=-lbsd || return 0
    say "enroot $(enroot version) built from $VENDOR/enroot-$ENROOT_VERSION.tar.xz"
}

build_pyxis() {
    if [ -f "$PYXIS_PLUGIN" ] && [ "$(cat "$PREFIX/share/pyxis/version" 2>/dev/null)" = "$PYXIS_VERSION $(srun --version)" ]; then
        say "pyxis $PYXIS_VERSION installed"
        return 0
    fi
    build_vendored pyxis "$PYXIS_VERSION" : || return 0
    # A SPANK plugin must match the Slurm it runs under: rebuilt when srun's version changes.
    echo "$PYXIS_VERSION $(srun --version)" >"$PREFIX/share/pyxis/version"
    say "pyxis $PYXIS_VERSION built against $(srun --version)"
}

# enroot's paths for every user (root included) on node-local disk: the defaults follow XDG_* folders
# that slurmstepd's environment may lack. SLURMD_NODENAME (set where pyxis runs enroot) keeps apart the
# nodes of a cluster whose slurmds share one host, as the local cluster's do.
enroot_config() {
    local conf="$PREFIX/etc/enroot/enroot.conf.d/hpctrain.conf"
    [ -d "$(dirname "$conf")" ] || return 0
    cat >"$conf" <<'CONF'
ENROOT_RUNTIME_PATH /run/enroot/${SLURMD_NODENAME:-host}/user-$(id -u)
ENROOT_CACHE_PATH /var/lib/enroot/cache/user-$(id -u)
ENROOT_DATA_PATH /var/lib/enroot/data/${SLURMD_NODENAME:-host}/user-$(id -u)
CONF
}

build_enroot
enroot_config
build_pyxis
say "runc $(runc --version | head -n 1 | awk '{print $3}') installed"
# The image the container tests train in (cached: rebuilt only when hpctrain's version or the script
# changes).
if "$REPO/scripts/build-image.sh" >/tmp/hpctrain-build-image.log 2>&1; then
    say "image $(tail -n 1 /tmp/hpctrain-build-image.log) ready"
else
    say "image not built: $(tail -n 1 /tmp/hpctrain-build-image.log)"
fi
