#!/usr/bin/env bash
# build-slurm.sh - build Slurm from the vendored source once, into /opt, for the version matrix.
#
#   scripts/build-slurm.sh 25.11     build (or reuse) /opt/hpctrain-slurm/25.11 from source
#   scripts/build-slurm.sh 24.11     a Debian trixie root filesystem with its Slurm, in .../24.11/rootfs
#   scripts/build-slurm.sh 26.05     the same from Debian sid (forky's Slurm), in .../26.05/rootfs
#   scripts/build-slurm.sh --available 25.11    exit 0 if built or buildable here, else say why, exit 3
#   (22.05 is this host's Debian Slurm: nothing to build, always available)
#
# 25.11: no Debian suite ships it; the source is ../shared/vendor/slurm-25.11.<patch>.tar.xz next
# to the repository (override with HPCTRAIN_SLURM_VENDOR_DIR), built with Debian's build
# dependencies. 24.11 and 26.05: mmdebstrap installs Debian's packages. Either is cached: a prefix
# holding a finished-build stamp is reused as is. The prefix root can be moved with
# HPCTRAIN_SLURM_PREFIX_ROOT (default /opt/hpctrain-slurm).
set -euo pipefail

PROG="$(basename "$0")"
readonly PROG
REPO="$(cd "$(dirname "$0")/.." && pwd)"
readonly REPO
readonly VENDOR_DIR="${HPCTRAIN_SLURM_VENDOR_DIR:-${REPO}/../shared/vendor}"
readonly PREFIX_ROOT="${HPCTRAIN_SLURM_PREFIX_ROOT:-/opt/hpctrain-slurm}"
# What slurmctld, slurmdbd and pyslurm need: munge auth, MariaDB accounting,
# JSON/YAML serializers (the --json output), hwloc and pmix for srun.
readonly BUILD_DEPS=(build-essential pkg-config libmunge-dev munge libmariadb-dev
    libjson-c-dev libyaml-dev libhwloc-dev libpmix-dev liblz4-dev zlib1g-dev
    libcurl4-openssl-dev libssl-dev python3-venv python3-dev)

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    printf '%s: ERROR: %s\n' "$PROG" "$*" >&2
    exit 1
}

# debian_rootfs SUITE: Debian's Slurm (and what the cluster and hpctrain's tests need) in a chroot.
debian_rootfs() {
    local suite=$1 started=$SECONDS rootfs="${PREFIX}/rootfs"
    command -v mmdebstrap >/dev/null ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap >/dev/null
    mkdir -p "$PREFIX"
    # Its cluster binds /dev, /run and the repository's folder into it: removing it mounted would
    # remove those. `down` stops that cluster and unmounts (and fails if something stays mounted).
    if [[ -d "$rootfs" ]]; then
        "${REPO}/scripts/local-cluster.sh" --slurm "$VERSION" down >&2 ||
            die "could not stop and unmount ${rootfs}; not removing it"
    fi
    rm -rf "$rootfs"
    log "making a Debian ${suite} root filesystem in ${rootfs}"
    # The mirror may serve a snapshot whose Release file is past its Valid-Until (sid's is short).
    nice -n 10 mmdebstrap --variant=apt --components=main --aptopt='Acquire::Check-Valid-Until "false"' \
        --include=slurm-wlm,slurmdbd,munge,mariadb-client,python3,python3-venv,procps,iproute2,libpmix-dev \
        "$suite" "$rootfs" http://deb.debian.org/debian >"${PREFIX}/mmdebstrap.log" 2>&1 || {
        tail -n 30 "${PREFIX}/mmdebstrap.log" >&2
        die "mmdebstrap ${suite} failed"
    }
    # shellcheck disable=SC2016 # dpkg-query's own ${Version}
    printf 'made %s from Debian %s (%s) in %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$suite" \
        "$(chroot "$rootfs" dpkg-query -W -f='${Version}' slurm-wlm)" "$((SECONDS - started))" >"$STAMP"
    log "done: $(cat "$STAMP")"
}

# find_source: set TARBALL to the vendored source of VERSION, or say why there is none.
find_source() {
    local tarballs
    shopt -s nullglob
    tarballs=("${VENDOR_DIR}/slurm-${VERSION}".*.tar.xz)
    shopt -u nullglob
    if ((${#tarballs[@]} != 1)); then
        log "expected one ${VENDOR_DIR}/slurm-${VERSION}.*.tar.xz, found ${#tarballs[@]}"
        return 1
    fi
    TARBALL="${tarballs[0]}"
}

# build_from_source: the vendored release, configured for PREFIX, built with 2 jobs, installed.
build_from_source() {
    local missing package build_dir started
    find_source || die "no source to build Slurm ${VERSION} from"

    missing=()
    for package in "${BUILD_DEPS[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$package")
    done
    if ((${#missing[@]})); then
        log "installing build dependencies: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
    fi

    # A build that stops half way (killed, out of disk) resumes where make left off.
    build_dir="/var/tmp/hpctrain-slurm-build-${VERSION}"
    if [[ ! -x "${build_dir}/configure" ]]; then
        rm -rf "$build_dir"
        mkdir -p "$build_dir"
        log "unpacking ${TARBALL}"
        tar -xJf "$TARBALL" -C "$build_dir" --strip-components=1
    fi

    started=$SECONDS
    cd "$build_dir"
    log "configuring for ${PREFIX}"
    # The configuration lives with the cluster (SLURM_CONF), not in the prefix. Shared libraries
    # only: the daemons, the commands and pyslurm link libslurmfull.so, and static archives would
    # compile every library and plugin source a second time (without PIC).
    [[ -f config.status ]] || nice -n 10 ./configure --prefix="$PREFIX" --sysconfdir="${PREFIX}/etc" \
        --disable-debug --disable-static --enable-multiple-slurmd \
        >"${build_dir}/configure.log" 2>&1 || {
        tail -n 30 "${build_dir}/configure.log" >&2
        die "configure failed"
    }
    log "building with make -j2 (nice 10)"
    nice -n 10 make -j2 >"${build_dir}/make.log" 2>&1 || {
        tail -n 30 "${build_dir}/make.log" >&2
        die "make failed"
    }
    nice -n 10 make install >"${build_dir}/install.log" 2>&1 || {
        tail -n 30 "${build_dir}/install.log" >&2
        die "make install failed"
    }
    mkdir -p "${PREFIX}/etc"
    printf 'built %s from %s in %ss on %s cores\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        "$(basename "$TARBALL")" "$((SECONDS - started))" "$(nproc)" >"$STAMP"
    cd /
    rm -rf "$build_dir"
    log "done: $(cat "$STAMP")"
}

# The whole script is read before it runs (main at the end), so editing it mid-build is harmless.
main() {
    local check=0
    if [[ "${1:-}" == --available ]]; then
        check=1
        shift
    fi
    [[ $# -eq 1 ]] || die "usage: $PROG [--available] VERSION (e.g. 25.11)"
    VERSION="$1"
    [[ "$VERSION" =~ ^[0-9]+\.[0-9]+$ ]] || die "version must look like 25.11, got '${VERSION}'"
    if [[ "$VERSION" == 22.05 ]]; then
        log "Slurm 22.05 is this host's Debian packages (scripts/local-cluster.sh up installs them)"
        return 0
    fi
    PREFIX="${PREFIX_ROOT}/${VERSION}"
    STAMP="${PREFIX}/.built"
    if [[ -f "$STAMP" ]]; then
        log "Slurm ${VERSION} already built in ${PREFIX} ($(cat "$STAMP"))"
        return 0
    fi
    local suite=""
    case "$VERSION" in
        24.11) suite=trixie ;;
        26.05) suite=sid ;;
    esac
    if ((check)); then # buildable here: from Debian's mirror, or from the vendored source
        [[ -n "$suite" ]] || find_source || return 3
        return 0
    fi
    if [[ -n "$suite" ]]; then
        debian_rootfs "$suite"
    else
        build_from_source
    fi
}

# (one line: bash reads a script as it runs, so an edit mid-run must not add commands after main)
main "$@"; exit $?
