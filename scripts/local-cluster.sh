#!/usr/bin/env bash
# local-cluster.sh - run a real two-node Slurm cluster on this (Debian, root) host.
#
#   scripts/local-cluster.sh up [--no-accounting]   start everything (idempotent)
#   scripts/local-cluster.sh down [--wipe]          stop everything, unmount a root filesystem (--wipe: drop all state)
#   scripts/local-cluster.sh status                 show daemons + sinfo; exit 0 iff usable
#   scripts/local-cluster.sh recover                kill stuck steps, resume bad nodes
#   scripts/local-cluster.sh accounting on|off      toggle slurmdbd accounting (sacct)
#   scripts/local-cluster.sh accounting             print the current accounting mode
#   scripts/local-cluster.sh env                    print the exports that point clients at it
#   scripts/local-cluster.sh run CMD...             run CMD with this cluster's Slurm commands
#
# Every command takes --slurm 22.05|24.11|25.11|26.05 (or HPCTRAIN_SLURM): 22.05 is this host's
# Debian Slurm (the default); the others run beside it on their own ports, from scripts/build-slurm.sh:
# 25.11 built from source under /opt, 24.11 and 26.05 in Debian trixie/sid root filesystems (chroot).
# See docs/local-cluster.md and docs/compatibility.md.
# Functions that run only through wait_until "$@" read as unreachable to shellcheck.
# shellcheck disable=SC2317
set -euo pipefail

# The Slurm series this run manages: `--slurm V` anywhere in the arguments, else HPCTRAIN_SLURM.
SLURM_SERIES="${HPCTRAIN_SLURM:-22.05}"
ARGS=()
while (($#)); do
    case "$1" in
        --slurm)
            (($# >= 2)) || { echo "local-cluster.sh: --slurm needs a version" >&2 && exit 2; }
            SLURM_SERIES=$2
            shift 2
            ;;
        --slurm=*)
            SLURM_SERIES=${1#--slurm=}
            shift
            ;;
        *)
            ARGS+=("$1")
            shift
            ;;
    esac
done
set -- "${ARGS[@]+"${ARGS[@]}"}"

readonly NODES=(node1 node2)
readonly NODE_RANGE="node[1-2]"
readonly GPUS_PER_NODE=4
readonly SLURM_PREFIX_ROOT="${HPCTRAIN_SLURM_PREFIX_ROOT:-/opt/hpctrain-slurm}"
SCRIPT="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
readonly SCRIPT
# 1 inside a release's root filesystem, where this script runs again (started by its host side).
readonly IN_ROOTFS="${HPCTRAIN_IN_ROOTFS:-0}"
ROOTFS=""

# One MariaDB and one munged serve every series; each series has its own daemons, ports,
# configuration, state and accounting database, so clusters run side by side.
BASE_STATE_DIR="${HPCTRAIN_LOCAL_STATE_DIR:-/var/lib/hpctrain-local}"
BASE_LOG_DIR="${HPCTRAIN_LOCAL_LOG_DIR:-/var/log/hpctrain-local}"
case "$SLURM_SERIES" in
    22.05)
        PORT_OFFSET=0
        SLURM_PREFIX=""
        CLUSTER_NAME="hpctrain-local"
        STATE_DIR="$BASE_STATE_DIR"
        LOG_DIR="$BASE_LOG_DIR"
        CONF_DIR="/etc/slurm"
        DB_NAME="slurm_acct_db"
        ;;
    24.11 | 26.05)
        # Debian's own packages in a root filesystem: inside it, the paths of a plain host.
        PORT_OFFSET=$([[ "$SLURM_SERIES" == 24.11 ]] && echo 200 || echo 300)
        SLURM_PREFIX=""
        ROOTFS="${SLURM_PREFIX_ROOT}/${SLURM_SERIES}/rootfs"
        CLUSTER_NAME="hpctrain-${SLURM_SERIES/./}"
        STATE_DIR="$BASE_STATE_DIR"
        LOG_DIR="$BASE_LOG_DIR"
        CONF_DIR="/etc/slurm"
        DB_NAME="slurm_acct_db_${SLURM_SERIES/./}"
        if ((!IN_ROOTFS)) && [[ ! -x "${ROOTFS}/usr/sbin/slurmctld" ]]; then
            echo "local-cluster.sh: no Slurm ${SLURM_SERIES} root filesystem in ${ROOTFS}: run scripts/build-slurm.sh ${SLURM_SERIES}" >&2
            exit 1
        fi
        ;;
    25.11)
        PORT_OFFSET=100
        SLURM_PREFIX="${SLURM_PREFIX_ROOT}/${SLURM_SERIES}"
        CLUSTER_NAME="hpctrain-${SLURM_SERIES/./}"
        STATE_DIR="${BASE_STATE_DIR}-${SLURM_SERIES}"
        LOG_DIR="${BASE_LOG_DIR}-${SLURM_SERIES}"
        # The build's sysconfdir: its commands find slurm.conf there without SLURM_CONF.
        CONF_DIR="${SLURM_PREFIX}/etc"
        DB_NAME="slurm_acct_db_${SLURM_SERIES/./}"
        [[ -x "${SLURM_PREFIX}/sbin/slurmctld" ]] || {
            echo "local-cluster.sh: Slurm ${SLURM_SERIES} is not built in ${SLURM_PREFIX}: run scripts/build-slurm.sh ${SLURM_SERIES}" >&2
            exit 1
        }
        export PATH="${SLURM_PREFIX}/sbin:${SLURM_PREFIX}/bin:${PATH}"
        ;;
    *)
        echo "local-cluster.sh: unknown --slurm ${SLURM_SERIES} (known: 22.05, 24.11, 25.11, 26.05)" >&2
        exit 2
        ;;
esac
export SLURM_CONF="${CONF_DIR}/slurm.conf"
readonly SLURM_SERIES PORT_OFFSET SLURM_PREFIX ROOTFS CLUSTER_NAME STATE_DIR LOG_DIR CONF_DIR DB_NAME
readonly BASE_STATE_DIR BASE_LOG_DIR
readonly CTLD_PORT=$((6817 + PORT_OFFSET))
readonly DBD_PORT=$((6819 + PORT_OFFSET))
# Slurm 25.05 and later may requeue a job to the front of the queue, eligible at once
# (`--requeue=expedite`), where the cluster allows it.
case "$SLURM_SERIES" in
    25.11 | 26.05) readonly CTLD_PARAMETERS_LINE=$'\n'"SlurmctldParameters=enable_expedited_requeue" ;;
    *) readonly CTLD_PARAMETERS_LINE="" ;;
esac
# The 22.05 cluster's slurm.conf stays byte-identical (a change would restart its daemons under
# everyone's jobs), so only the other series spell slurmdbd's port.
if ((PORT_OFFSET)); then
    readonly DBD_PORT_LINE=$'\n'"AccountingStoragePort=${DBD_PORT}"
else
    readonly DBD_PORT_LINE=""
fi
readonly NODE_PORTS="$((17001 + PORT_OFFSET))-$((17000 + PORT_OFFSET + ${#NODES[@]}))"
TIMEOUT="${HPCTRAIN_LOCAL_TIMEOUT:-90}"
readonly TIMEOUT

readonly RUN_DIR="${STATE_DIR}/run"
readonly MODE_FILE="${STATE_DIR}/accounting-mode"
readonly DB_RUN_DIR="${BASE_STATE_DIR}/run"
readonly DB_DATADIR="${BASE_STATE_DIR}/mysql"
readonly DB_CNF="${BASE_STATE_DIR}/my.cnf"
readonly DB_SOCKET="${DB_RUN_DIR}/mysqld.sock"
readonly DB_PIDFILE="${DB_RUN_DIR}/mysqld.pid"
readonly DB_LOG="${BASE_LOG_DIR}/mariadb.log"
readonly DB_PORT=13306
readonly DB_USER="slurm"
readonly DB_PASS="hpctrain-local"
readonly MUNGE_PIDFILE="/run/munge/munged.pid"
# 22.05 keeps the lock it always had, so older copies of this script still take turns with it.
if [[ "$SLURM_SERIES" == 22.05 ]]; then
    readonly LOCK_FILE="/run/lock/hpctrain-local-cluster.lock"
else
    readonly LOCK_FILE="/run/lock/hpctrain-local-cluster-${SLURM_SERIES}.lock"
fi
readonly PACKAGES=(slurm-wlm munge mariadb-server slurmdbd shellcheck libpmix-dev)

PROG="$(basename "$0")"
readonly PROG

# ---------------------------------------------------------------- helpers --

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }

# die MESSAGE [LOGFILE]: one-line error, then the tail of the relevant log.
die() {
    printf '%s: ERROR: %s\n' "$PROG" "$1" >&2
    if [[ $# -ge 2 && -r "$2" ]]; then
        printf -- '--- last lines of %s ---\n' "$2" >&2
        tail -n 25 "$2" >&2
    fi
    exit 1
}

usage() {
    sed -n '2,14s/^# \{0,1\}//p' "$0"
}

# Serialise concurrent runs. Daemons are started with fd 9 closed ("9>&-") so
# they do not inherit (and hold) the lock.
take_lock() {
    mkdir -p "$(dirname "$LOCK_FILE")"
    exec 9>"$LOCK_FILE"
    if ! flock -w 300 9; then
        die "another local-cluster.sh run holds ${LOCK_FILE} for more than 300s"
    fi
}

# wait_until SECONDS CMD...: poll CMD every 0.5s until it succeeds or time runs out.
wait_until() {
    local limit=$1 deadline
    shift
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            return 1
        fi
        sleep 0.5
    done
}

# pid_of PIDFILE COMM_REGEX: print the pid if the pidfile names a live process of that name.
pid_of() {
    local pidfile=$1 comm_re=$2 pid comm
    [[ -r "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" && -r "/proc/${pid}/comm" ]] || return 1
    comm="$(<"/proc/${pid}/comm")" || return 1
    [[ "$comm" =~ ^(${comm_re})$ ]] || return 1
    printf '%s\n' "$pid"
}

is_running() { pid_of "$@" >/dev/null; }

# wait_daemon SECONDS PIDFILE COMM CMD...: wait until CMD succeeds; fail early
# (return 2) when the daemon's process is gone for more than a few seconds.
wait_daemon() {
    local limit=$1 pidfile=$2 comm=$3 deadline gone_since=-1
    shift 3
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if is_running "$pidfile" "$comm"; then
            gone_since=-1
        elif ((gone_since < 0)); then
            gone_since=$SECONDS
        elif ((SECONDS - gone_since >= 3)); then
            return 2
        fi
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# descendants PID: print PID and all its descendants.
descendants() {
    local queue=("$1") pid child
    while ((${#queue[@]})); do
        pid=${queue[0]}
        queue=("${queue[@]:1}")
        printf '%s\n' "$pid"
        while read -r child; do
            [[ -n "$child" ]] && queue+=("$child")
        done < <(pgrep -P "$pid" || true)
    done
}

# stop_pids SECONDS PID...: SIGTERM, wait, then SIGKILL what is left.
stop_pids() {
    local limit=$1 pid alive
    shift
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    local deadline=$((SECONDS + limit))
    while :; do
        alive=()
        for pid in "$@"; do
            if kill -0 "$pid" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/${pid}/status" 2>/dev/null; then
                alive+=("$pid")
            fi
        done
        ((${#alive[@]})) || return 0
        if ((SECONDS >= deadline)); then
            kill -KILL "${alive[@]}" 2>/dev/null || true
            sleep 0.2
            return 0
        fi
        sleep 0.2
    done
}

# stop_daemon PIDFILE COMM_REGEX: stop the daemon a pidfile names (if alive).
stop_daemon() {
    local pid
    if pid="$(pid_of "$1" "$2")"; then
        stop_pids 20 "$pid"
    fi
    rm -f "$1"
}


# pids_by_comm COMM_REGEX: pids of every process whose name matches exactly.
pids_by_comm() {
    local d comm
    for d in /proc/[0-9]*; do
        comm="$(cat "${d}/comm" 2>/dev/null)" || continue
        if [[ "$comm" =~ ^(${1})$ ]]; then
            printf '%s\n' "${d#/proc/}"
        fi
    done
}

# our_pids_by_comm COMM_REGEX: pids_by_comm, limited to processes that run this series' Slurm
# binaries (the same file as on PATH), so the clusters of other series on this host are never touched.
our_pids_by_comm() {
    local pid comm binary
    while read -r pid; do
        comm="$(cat "/proc/${pid}/comm" 2>/dev/null)" || continue
        binary="$(command -v "$comm" 2>/dev/null)" || continue
        if [[ "/proc/${pid}/exe" -ef "$binary" ]]; then printf '%s\n' "$pid"; fi
    done < <(pids_by_comm "$1")
}

accounting_mode() {
    if [[ -r "$MODE_FILE" ]]; then
        cat "$MODE_FILE"
    else
        echo on
    fi
}

# install_file DEST MODE < content: write only when the content changed; 0 = changed.
install_file() {
    local dest=$1 mode=$2 tmp
    tmp="$(mktemp "${dest}.XXXXXX")"
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [[ -f "$dest" ]] && cmp -s "$tmp" "$dest"; then
        rm -f "$tmp"
        chmod "$mode" "$dest"
        return 1
    fi
    mv -f "$tmp" "$dest"
    return 0
}

# --------------------------------------------------------------- packages --

ensure_packages() {
    local missing=() pkg status
    for pkg in "${PACKAGES[@]}"; do
        status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
        [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    log "installing missing packages: ${missing[*]}"
    # No init system here: keep maintainer scripts from trying to start services.
    local own_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -q &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
    } >"/tmp/hpctrain-local-apt.log" 2>&1 || rc=$?
    ((own_policy)) && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || die "apt-get failed (exit ${rc})" /tmp/hpctrain-local-apt.log
}

# ----------------------------------------------------------------- config --

ensure_hosts() {
    local n missing=()
    for n in "${NODES[@]}"; do
        grep -Eq "^[^#]*[[:space:]]${n}([[:space:]]|$)" /etc/hosts || missing+=("$n")
    done
    if ((${#missing[@]})); then
        printf '127.0.0.1 %s\n' "${missing[*]}" >>/etc/hosts
    fi
}

ensure_dirs() {
    local n i
    mkdir -p "$STATE_DIR" "$LOG_DIR" "$RUN_DIR" "${STATE_DIR}/slurmctld" "$CONF_DIR"
    for n in "${NODES[@]}"; do
        mkdir -p "${STATE_DIR}/slurmd/${n}" "${STATE_DIR}/fakegpu/${n}"
        for ((i = 0; i < GPUS_PER_NODE; i++)); do
            [[ -e "${STATE_DIR}/fakegpu/${n}/nvidia${i}" ]] || : >"${STATE_DIR}/fakegpu/${n}/nvidia${i}"
        done
    done
}

render_slurm_conf() {
    local mode=$1 host acct
    host="$(hostname -s)"
    if [[ "$mode" == on ]]; then
        # gres/gpu as an accounting TRES is only valid with slurmdbd (slurmctld
        # refuses to start otherwise).
        acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost${DBD_PORT_LINE}
AccountingStorageTRES=gres/gpu
# Job comments in accounting: hpctrain index check finds the job of a killed submit by the run id
# its comment carries, also once the job has left the queue.
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
    else
        acct="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
    fi
    # MaxJobCount: benchmarks/bench_status_backends.py holds 10,000 jobs (a production queue's
    # size) beside the tests' own, and cancelled ones stay for MinJobAge, so a second run within
    # it finds the first's still there; Slurm's default cap is 10,000.
    cat <<EOF
# Written by scripts/local-cluster.sh (hpctrain). Local test cluster; edits are overwritten.
ClusterName=${CLUSTER_NAME}
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=${CTLD_PORT}
StateSaveLocation=${STATE_DIR}/slurmctld
SlurmdSpoolDir=${STATE_DIR}/slurmd/%n
SlurmctldPidFile=${RUN_DIR}/slurmctld.pid
SlurmdPidFile=${RUN_DIR}/slurmd-%n.pid
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
MaxJobCount=40000
KillWait=5
Waittime=0
JobRequeue=1
PreemptType=preempt/none
SchedulerType=sched/backfill${CTLD_PARAMETERS_LINE}
SchedulerParameters=bf_interval=2,sched_interval=2,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
GresTypes=gpu
${acct}
JobCompType=jobcomp/none
MailProg=/bin/true
NodeName=${NODE_RANGE} NodeHostname=${host} NodeAddr=127.0.0.1 Port=${NODE_PORTS} CPUs=8 RealMemory=8000 Gres=gpu:${GPUS_PER_NODE} State=UNKNOWN
PartitionName=debug Nodes=${NODE_RANGE} Default=YES MaxTime=02:00:00 State=UP
PartitionName=cpu Nodes=${NODE_RANGE} MaxTime=04:00:00 State=UP
EOF
}

render_gres_conf() {
    local n
    echo "# Written by scripts/local-cluster.sh (hpctrain): fake GPUs are empty files."
    echo "AutoDetect=off"
    for n in "${NODES[@]}"; do
        echo "NodeName=${n} Name=gpu File=${STATE_DIR}/fakegpu/${n}/nvidia[0-$((GPUS_PER_NODE - 1))]"
    done
}

render_slurmdbd_conf() {
    cat <<EOF
# Written by scripts/local-cluster.sh (hpctrain).
AuthType=auth/munge
DbdHost=localhost
DbdPort=${DBD_PORT}
SlurmUser=root
DebugLevel=info
LogFile=${LOG_DIR}/slurmdbd.log
PidFile=${RUN_DIR}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${DB_PORT}
StorageUser=${DB_USER}
StoragePass=${DB_PASS}
StorageLoc=${DB_NAME}
EOF
}

render_my_cnf() {
    cat <<EOF
# Written by scripts/local-cluster.sh (hpctrain): private MariaDB for slurmdbd.
[mysqld]
user=mysql
datadir=${DB_DATADIR}
socket=${DB_SOCKET}
pid-file=${DB_PIDFILE}
port=${DB_PORT}
bind-address=127.0.0.1
skip-name-resolve
log-error=${DB_LOG}
innodb_buffer_pool_size=128M
innodb_log_file_size=64M
innodb_lock_wait_timeout=900
innodb_flush_log_at_trx_commit=2
max_allowed_packet=64M
[mysqld_safe]
log-error=${DB_LOG}
pid-file=${DB_PIDFILE}
socket=${DB_SOCKET}
[client]
socket=${DB_SOCKET}
port=${DB_PORT}
EOF
}

# write_slurm_configs MODE: returns 0 if slurm.conf or gres.conf changed.
write_slurm_configs() {
    local changed=1
    if render_slurm_conf "$1" | install_file "${CONF_DIR}/slurm.conf" 644; then changed=0; fi
    if render_gres_conf | install_file "${CONF_DIR}/gres.conf" 644; then changed=0; fi
    if "$(dirname "$0")/cluster/containers.sh" "$CONF_DIR"; then changed=0; fi
    return "$changed"
}

# ---------------------------------------------------------------- daemons --

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if is_running "$MUNGE_PIDFILE" munged && munge_ok; then
        return 0
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        if command -v mungekey >/dev/null; then
            runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        fi
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    if ! is_running "$MUNGE_PIDFILE" munged; then
        rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$MUNGE_PIDFILE"
        runuser -u munge -- /usr/sbin/munged >/dev/null 2>&1 9>&- ||
            die "munged failed to start" /var/log/munge/munged.log
    fi
    wait_until 15 munge_ok || die "munge does not answer (munge -n | unmunge)" /var/log/munge/munged.log
}

db_ok() { mysqladmin --socket="$DB_SOCKET" -uroot ping >/dev/null 2>&1; }

start_mariadb() {
    mkdir -p "$BASE_STATE_DIR"
    render_my_cnf | install_file "$DB_CNF" 644 || true
    if db_ok; then
        return 0
    fi
    mkdir -p "$DB_DATADIR"
    mkdir -p "$DB_RUN_DIR" "$(dirname "$DB_LOG")"
    chown mysql:mysql "$DB_DATADIR" "$DB_RUN_DIR"
    touch "$DB_LOG"
    chown mysql:mysql "$DB_LOG"
    if [[ ! -d "${DB_DATADIR}/mysql" ]]; then
        local installer=mariadb-install-db
        command -v "$installer" >/dev/null || installer=mysql_install_db
        "$installer" --defaults-file="$DB_CNF" --user=mysql --datadir="$DB_DATADIR" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"${LOG_DIR}/mariadb-install.log" 2>&1 ||
            die "mariadb-install-db failed" "${LOG_DIR}/mariadb-install.log"
    fi
    setsid mysqld_safe --defaults-file="$DB_CNF" </dev/null >>"$DB_LOG" 2>&1 9>&- &
    wait_until "$TIMEOUT" db_ok || die "MariaDB did not answer within ${TIMEOUT}s" "$DB_LOG"
}

# ensure_database: this series' accounting database and the slurmdbd user's rights on it.
ensure_database() {
    mysql --socket="$DB_SOCKET" -uroot <<EOF || die "creating the slurm database/user failed" "$DB_LOG"
CREATE DATABASE IF NOT EXISTS ${DB_NAME};
CREATE USER IF NOT EXISTS '${DB_USER}'@'localhost' IDENTIFIED BY '${DB_PASS}';
CREATE USER IF NOT EXISTS '${DB_USER}'@'127.0.0.1' IDENTIFIED BY '${DB_PASS}';
GRANT ALL ON ${DB_NAME}.* TO '${DB_USER}'@'localhost';
GRANT ALL ON ${DB_NAME}.* TO '${DB_USER}'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
}

dbd_ok() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

start_slurmdbd() {
    local changed=0
    if render_slurmdbd_conf | install_file "${CONF_DIR}/slurmdbd.conf" 600; then changed=1; fi
    chown root:root "${CONF_DIR}/slurmdbd.conf"
    if ((changed)); then
        stop_daemon "${RUN_DIR}/slurmdbd.pid" slurmdbd
    fi
    if ! is_running "${RUN_DIR}/slurmdbd.pid" slurmdbd; then
        slurmdbd >>"${LOG_DIR}/slurmdbd.log" 2>&1 9>&- || die "slurmdbd failed to start" "${LOG_DIR}/slurmdbd.log"
    fi
    local rc=0
    wait_daemon "$TIMEOUT" "${RUN_DIR}/slurmdbd.pid" slurmdbd dbd_ok || rc=$?
    ((rc != 2)) || die "slurmdbd exited during startup" "${LOG_DIR}/slurmdbd.log"
    ((rc == 0)) || die "slurmdbd did not answer within ${TIMEOUT}s" "${LOG_DIR}/slurmdbd.log"
    if ! sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
        sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null ||
            die "sacctmgr add cluster ${CLUSTER_NAME} failed" "${LOG_DIR}/slurmdbd.log"
    fi
}

ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
    if ! is_running "${RUN_DIR}/slurmctld.pid" slurmctld; then
        slurmctld >>"${LOG_DIR}/slurmctld.log" 2>&1 9>&- || die "slurmctld failed to start" "${LOG_DIR}/slurmctld.log"
    fi
    local rc=0
    wait_daemon "$TIMEOUT" "${RUN_DIR}/slurmctld.pid" slurmctld ctld_ok || rc=$?
    ((rc != 2)) || die "slurmctld exited during startup" "${LOG_DIR}/slurmctld.log"
    ((rc == 0)) || die "slurmctld did not answer within ${TIMEOUT}s" "${LOG_DIR}/slurmctld.log"
}

start_slurmds() {
    local n
    for n in "${NODES[@]}"; do
        if ! is_running "${RUN_DIR}/slurmd-${n}.pid" slurmd; then
            slurmd -N "$n" >>"${LOG_DIR}/slurmd-${n}.log" 2>&1 9>&- ||
                die "slurmd -N ${n} failed to start" "${LOG_DIR}/slurmd-${n}.log"
        fi
    done
}

stop_slurm_daemons() {
    local n
    for n in "${NODES[@]}"; do
        stop_daemon "${RUN_DIR}/slurmd-${n}.pid" slurmd
    done
    stop_daemon "${RUN_DIR}/slurmctld.pid" slurmctld
}

# ------------------------------------------------------------ node health --

# node_states: lines "NODE STATE" (State= from scontrol, e.g. IDLE, MIXED+DRAIN).
node_states() {
    scontrol -o show node 2>/dev/null |
        sed -n 's/^NodeName=\([^ ]*\) .* State=\([^ ]*\) .*$/\1 \2/p'
}

node_usable() {
    local state=$1
    [[ "$state" =~ ^(IDLE|MIXED|ALLOCATED|COMPLETING)(\+COMPLETING)?$ ]]
}

nodes_usable() {
    local n state count=0
    while read -r n state; do
        [[ -n "$n" ]] || continue
        node_usable "$state" || return 1
        count=$((count + 1))
    done < <(node_states)
    ((count == ${#NODES[@]}))
}

# nodes_registered: every node has answered slurmctld (not UNKNOWN, not NOT_RESPONDING).
nodes_registered() {
    local n state count=0
    while read -r n state; do
        [[ -n "$n" ]] || continue
        [[ "$state" == UNKNOWN* || "$state" == *NOT_RESPONDING* ]] && return 1
        count=$((count + 1))
    done < <(node_states)
    ((count == ${#NODES[@]}))
}

sacct_ok() { sacct -n -X -P -o JobID >/dev/null 2>&1; }

cluster_usable() {
    ctld_ok || return 1
    sinfo -h >/dev/null 2>&1 || return 1
    nodes_usable || return 1
    if [[ "$(accounting_mode)" == on ]]; then
        sacct_ok || return 1
    fi
}

# kill_stuck_steps AGGRESSIVE: kill slurmstepd trees whose job is gone (or, when
# AGGRESSIVE=1, also jobs stuck in COMPLETING).
kill_stuck_steps() {
    local aggressive=$1 pid cmd job state victims=()
    while read -r pid; do
        [[ -n "$pid" ]] || continue
        cmd="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)" || continue
        [[ "$cmd" =~ \[([0-9]+)[.\]] ]] || continue
        job=${BASH_REMATCH[1]}
        state="$(squeue -h -t all -j "$job" -o %T 2>/dev/null | head -n 1 || true)"
        case "$state" in
            RUNNING | PENDING | CONFIGURING | SUSPENDED | RESIZING | SIGNALING | STAGE_OUT | REQUEUE_HOLD | REQUEUE_FED | RESV_DEL_HOLD | STOPPED)
                continue
                ;;
            COMPLETING)
                ((aggressive)) || continue
                ;;
        esac
        log "killing stuck slurmstepd ${pid} (${cmd% }; job state: ${state:-gone})"
        mapfile -t -O "${#victims[@]}" victims < <(descendants "$pid")
    done < <(our_pids_by_comm slurmstepd)
    if ((${#victims[@]})); then
        stop_pids 5 "${victims[@]}"
    fi
}

# resume_bad_nodes FORCE_DOWN: resume nodes that are DOWN/DRAIN/FAIL (with
# FORCE_DOWN=1 also nodes stuck COMPLETING: set DOWN first to clear them).
resume_bad_nodes() {
    local force=$1 n state
    while read -r n state; do
        [[ -n "$n" ]] || continue
        if [[ "$state" =~ (DOWN|DRAIN|FAIL) ]] || { ((force)) && [[ "$state" == *COMPLETING* ]]; }; then
            log "recovering node ${n} (state ${state})"
            if ((force)) && [[ ! "$state" =~ DOWN ]]; then
                scontrol update nodename="$n" state=down reason="hpctrain local-cluster recover" || true
            fi
            scontrol update nodename="$n" state=resume 2>/dev/null || true
        fi
    done < <(node_states)
}

wait_usable() {
    local what
    if ! wait_until "$TIMEOUT" cluster_usable; then
        if ! ctld_ok; then
            die "slurmctld does not answer after ${TIMEOUT}s" "${LOG_DIR}/slurmctld.log"
        fi
        local n state
        while read -r n state; do
            if ! node_usable "$state"; then
                die "node ${n} is ${state} after ${TIMEOUT}s (scontrol show node ${n})" "${LOG_DIR}/slurmd-${n}.log"
            fi
        done < <(node_states)
        what="$(sacct -n -X 2>&1 | head -n 1 || true)"
        die "sacct does not answer after ${TIMEOUT}s: ${what}" "${LOG_DIR}/slurmdbd.log"
    fi
}

# --------------------------------------------------------------- commands --

bring_up() {
    local mode=$1 restart_slurm=0
    # In a root filesystem the host side has installed, started munged and MariaDB, and made the
    # database (munged answers through the bound /run, MariaDB on 127.0.0.1).
    ((IN_ROOTFS)) || ensure_packages
    ensure_hosts
    ensure_dirs
    echo "$mode" >"$MODE_FILE"
    if write_slurm_configs "$mode"; then restart_slurm=1; fi
    ((IN_ROOTFS)) || start_munge
    if [[ "$mode" == on ]]; then
        if ((!IN_ROOTFS)); then
            start_mariadb
            ensure_database
        fi
        start_slurmdbd
    fi
    if ((restart_slurm)); then
        if is_running "${RUN_DIR}/slurmctld.pid" slurmctld; then
            log "slurm configuration changed: restarting slurmctld and slurmd"
        fi
        # Running jobs survive: slurmctld saves state, slurmstepd keeps running.
        stop_slurm_daemons
    fi
    start_slurmctld
    kill_stuck_steps 0
    start_slurmds
    # Give freshly started slurmds a moment to register before judging nodes.
    wait_until 15 nodes_registered || true
    resume_bad_nodes 0
    wait_usable
}

cmd_up() {
    local mode=on start=$SECONDS
    while (($#)); do
        case "$1" in
            --no-accounting) mode=off ;;
            *) die "unknown option for up: $1" ;;
        esac
        shift
    done
    take_lock
    bring_up "$mode"
    log "cluster ${CLUSTER_NAME} is up (accounting ${mode}) in $((SECONDS - start))s"
}

cmd_accounting() {
    if (($# == 0)); then
        accounting_mode
        return 0
    fi
    case "$1" in
        on | off) ;;
        *) die "usage: ${PROG} accounting on|off" ;;
    esac
    take_lock
    bring_up "$1"
    log "accounting is $1"
}

cmd_recover() {
    take_lock
    ctld_ok || die "slurmctld is not running; use '${PROG} up'"
    kill_stuck_steps 1
    start_slurmds
    resume_bad_nodes 1
    wait_usable
    log "cluster recovered"
}

stop_shared_services() {
    local pids
    if db_ok; then
        mysqladmin --socket="$DB_SOCKET" -uroot shutdown >/dev/null 2>&1 || true
    fi
    stop_daemon "$DB_PIDFILE" 'mariadbd|mysqld'
    mapfile -t pids < <(pids_by_comm 'mysqld_safe|mariadbd|mysqld' | while read -r p; do
        if tr '\0' ' ' <"/proc/${p}/cmdline" 2>/dev/null | grep -q -- "$DB_CNF\|$DB_DATADIR"; then echo "$p"; fi
    done)
    if ((${#pids[@]})); then stop_pids 10 "${pids[@]}"; fi
    stop_daemon "$MUNGE_PIDFILE" munged
}

cmd_env() {
    printf 'export PATH=%q\nexport SLURM_CONF=%q\nexport HPCTRAIN_SLURM=%q\n' "$PATH" "$SLURM_CONF" "$SLURM_SERIES"
}

cmd_down() {
    local wipe=0 pids
    while (($#)); do
        case "$1" in
            --wipe) wipe=1 ;;
            *) die "unknown option for down: $1" ;;
        esac
        shift
    done
    take_lock
    stop_slurm_daemons
    stop_daemon "${RUN_DIR}/slurmdbd.pid" slurmdbd
    # Leftovers: job steps and any daemon not found through its pidfile.
    mapfile -t pids < <(our_pids_by_comm 'slurmstepd|slurmd|slurmctld|slurmdbd')
    if ((${#pids[@]})); then
        local all=() p
        for p in "${pids[@]}"; do
            mapfile -t -O "${#all[@]}" all < <(descendants "$p")
        done
        stop_pids 10 "${all[@]}"
    fi
    if ((wipe)) && [[ "$SLURM_SERIES" != 22.05 ]] && db_ok; then
        mysql --socket="$DB_SOCKET" -uroot -e "DROP DATABASE IF EXISTS ${DB_NAME}" || true
    fi
    # MariaDB and munged serve every series: the 22.05 cluster owns them.
    if [[ "$SLURM_SERIES" == 22.05 ]]; then stop_shared_services; fi
    if ((wipe)); then
        rm -rf "$STATE_DIR" "$LOG_DIR"
        rm -f "${CONF_DIR}/slurm.conf" "${CONF_DIR}/gres.conf" "${CONF_DIR}/slurmdbd.conf"
        log "cluster stopped; state, logs and configs removed"
    else
        log "cluster stopped"
    fi
}

cmd_status() {
    local mode name pidfile comm pid n
    mode="$(accounting_mode)"
    printf 'accounting: %s\n' "$mode"
    local -a rows=(
        "munged|${MUNGE_PIDFILE}|munged"
        "mariadb|${DB_PIDFILE}|mariadbd|mysqld"
        "slurmdbd|${RUN_DIR}/slurmdbd.pid|slurmdbd"
        "slurmctld|${RUN_DIR}/slurmctld.pid|slurmctld"
    )
    for n in "${NODES[@]}"; do
        rows+=("slurmd(${n})|${RUN_DIR}/slurmd-${n}.pid|slurmd")
    done
    local row
    for row in "${rows[@]}"; do
        name=${row%%|*}
        row=${row#*|}
        pidfile=${row%%|*}
        comm=${row#*|}
        if pid="$(pid_of "$pidfile" "$comm")"; then
            printf '  %-16s running (pid %s)\n' "$name" "$pid"
        else
            printf '  %-16s stopped\n' "$name"
        fi
    done
    if command -v sinfo >/dev/null && ctld_ok; then
        sinfo || true
    else
        echo "sinfo: slurmctld not reachable"
    fi
    if cluster_usable; then
        echo "cluster: usable"
        return 0
    fi
    echo "cluster: NOT usable"
    return 1
}

# ------------------------------------------------------- root filesystems --

# mount_rootfs: /proc, /sys, /dev, /run and the repository's folder bound into the release's root
# filesystem, with this host's names and Python (hpctrain's venv there uses it: the host's wheels).
mount_rootfs() {
    local dir work python_home
    work="$(dirname "$(dirname "$(dirname "$SCRIPT")")")"
    python_home="$(python3 -c 'import sys; print(sys.base_prefix)')"
    for dir in /proc /sys /dev /run "$work" "$python_home"; do
        mkdir -p "${ROOTFS}${dir}"
        if ! mountpoint -q "${ROOTFS}${dir}"; then
            mount --rbind "$dir" "${ROOTFS}${dir}"
            # Where the host's mounts are shared (systemd), unmounting a bound copy's submount
            # (dev/pts) would unmount the host's own: events must flow only from the host inwards.
            mount --make-rslave "${ROOTFS}${dir}"
        fi
    done
    cp /etc/hosts "${ROOTFS}/etc/hosts"
}

# unmount_rootfs: undo mount_rootfs and anything else mounted below the root filesystem, deepest
# first. Deleting the folder while /dev or the repository's folder is bound there would delete them.
unmount_rootfs() {
    local point
    while read -r point; do # mounts made before mount_rootfs made them slaves
        mount --make-rslave "$point" 2>/dev/null || true
    done < <(mounts_below "$ROOTFS")
    while read -r point; do
        umount "$point" 2>/dev/null || umount -l "$point" 2>/dev/null || true
    done < <(mounts_below "$ROOTFS" | sort -r)
    local left
    left="$(mounts_below "$ROOTFS")"
    [[ -z "$left" ]] || die "still mounted below ${ROOTFS}: ${left%%$'\n'*}"
}

# mounts_below DIR: the mount points below DIR, one per line.
mounts_below() {
    awk -v root="${1}/" 'index($2, root) == 1 { print $2 }' /proc/self/mounts
}

# in_rootfs CMD...: CMD inside the release's root filesystem, in this directory.
in_rootfs() {
    chroot "$ROOTFS" /usr/bin/env -C "$PWD" HPCTRAIN_IN_ROOTFS=1 HPCTRAIN_SLURM="$SLURM_SERIES" \
        PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

# rootfs_command CMD ARGS...: a command of a root-filesystem release, from the host.
rootfs_command() {
    local cmd=$1
    shift
    [[ $EUID -eq 0 ]] || die "must run as root"
    if [[ "$cmd" == down ]]; then
        # A half-made root filesystem has no shell to stop anything with; it still gets unmounted.
        local rc=0
        if [[ -x "${ROOTFS}/bin/bash" ]]; then
            mount_rootfs
            in_rootfs "$SCRIPT" down "$@" || rc=$?
        fi
        unmount_rootfs
        return "$rc"
    fi
    mount_rootfs
    if [[ "$cmd" == up ]]; then
        # The services every release shares run on the host.
        start_munge
        start_mariadb
        ensure_database
    fi
    if [[ "$cmd" == run ]]; then
        in_rootfs "$@"
    else
        in_rootfs "$SCRIPT" "$cmd" "$@"
    fi
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    if [[ -n "$ROOTFS" ]] && ((!IN_ROOTFS)); then
        case "$cmd" in
            up | down | status | recover | accounting | env | run)
                rootfs_command "$cmd" "$@"
                return
                ;;
        esac
    fi
    case "$cmd" in
        up | down | recover | accounting)
            [[ $EUID -eq 0 ]] || die "must run as root"
            ;;
    esac
    case "$cmd" in
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status ;;
        recover) cmd_recover ;;
        accounting) cmd_accounting "$@" ;;
        env) cmd_env ;;
        run) HPCTRAIN_SLURM="$SLURM_SERIES" "$@" ;;
        -h | --help | help) usage ;;
        *)
            usage >&2
            exit 2
            ;;
    esac
}

# (one line: bash reads a script as it runs, so an edit mid-run must not add commands after main)
main "$@"; exit $?
