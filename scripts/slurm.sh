#!/usr/bin/env bash
# A throwaway one-node SLURM cluster on this host, for the tests of deploy/slurm/ (scripts/test.sh
# starts one): munged, slurmctld and slurmd as the current user, everything under DIR, on free
# ports, no cgroups, no accounting.
#
#   scripts/slurm.sh start DIR    # prints the path of its slurm.conf: export SLURM_CONF=that
#   scripts/slurm.sh stop DIR
#
# ABLATE_SLURM_CPUS (default: this host's cores) sets the node's CPUs; more than the host has is
# allowed (SlurmdParameters=config_overrides), so tiny test jobs need not queue for the cores.
# Both are idempotent: start on a running cluster prints its slurm.conf again; stop on a stopped
# (or never started) one does nothing. Needs Debian's slurm-wlm and munge (scripts/setup.sh).
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
CMD=$1
[ "$CMD" = stop ] && [ ! -d "$2" ] && exit 0
mkdir -p "$2"
DIR=$(cd "$2" && pwd)
CONF=$DIR/slurm.conf
DAEMONS=(slurmd slurmctld munged)  # the order they stop in

pid_of() { [ -s "$DIR/$1.pid" ] && cat "$DIR/$1.pid"; }
alive() { local pid; pid=$(pid_of "$1") && kill -0 "$pid" 2>/dev/null; }

stop() {
  local d pid i
  # Jobs outlive slurmd (each runs under its own slurmstepd): cancel them first, and wait (up to
  # KillWait and a little) for their processes to go.
  if alive slurmctld && alive slurmd; then
    SLURM_CONF=$CONF scancel --user="$(id -un)" 2>/dev/null || true
    for i in $(seq 100); do
      [ -z "$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for d in "${DAEMONS[@]}"; do
    pid=$(pid_of "$d") || continue
    kill "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$DIR/$d.pid"
  done
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

node_state() { SLURM_CONF=$CONF sinfo -h -o %T 2>/dev/null | head -1; }

start() {
  local d missing=()
  for d in munged slurmctld slurmd sinfo sbatch; do
    command -v "$d" >/dev/null 2>&1 || [ -x "/usr/sbin/$d" ] || missing+=("$d")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$0: SLURM is not installed (no ${missing[*]}): apt-get install slurm-wlm munge, or run scripts/setup.sh" >&2
    exit 1
  fi
  export PATH=$PATH:/usr/sbin
  if alive munged && alive slurmctld && alive slurmd && [ "$(node_state)" = idle ]; then
    echo "$CONF"
    return
  fi
  stop  # a partial or dead one: start afresh
  rm -rf "$DIR/munge" "$DIR/state" "$DIR/spool" "$DIR/log"
  mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool" "$DIR/log"
  chmod go+x "$DIR"; chmod 711 "$DIR/munge"  # munged wants its socket's directories searchable by all
  head -c 1024 /dev/urandom >"$DIR/munge/key"
  chmod 400 "$DIR/munge/key"
  munged --key-file="$DIR/munge/key" --socket="$DIR/munge/sock" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed"

  local host user cpus overrides=""
  host=$(hostname); user=$(id -un); cpus=${ABLATE_SLURM_CPUS:-$(nproc)}
  [ "$cpus" -gt "$(nproc)" ] && overrides="SlurmdParameters=config_overrides"
  cat >"$DIR/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
IgnoreSystemd=yes
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
EOF
  cat >"$CONF" <<EOF
ClusterName=ablate-test
SlurmctldHost=$host
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
KillWait=5
MinJobAge=120
# debug: tests/test_deploy_slurm.py waits for slurmd's "sent epilog complete" line of a killed task
SlurmdDebug=debug
$overrides
NodeName=$host CPUs=$cpus RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  slurmctld -f "$CONF"
  slurmd -f "$CONF"
  local i
  for i in $(seq 150); do
    [ "$(node_state)" = idle ] && { echo "$CONF"; return; }
    sleep 0.2
  done
  echo "$0: the cluster in $DIR did not come up (node: $(node_state || true)); its logs:" >&2
  tail -n 20 "$DIR"/log/*.log >&2 || true
  stop
  exit 1
}

case "$CMD" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
