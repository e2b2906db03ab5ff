#!/usr/bin/env bash
# A one-node Slurm cluster on this machine for launch tests (shared/recipes/test-hosts.md): munge,
# slurmctld and slurmd from Debian's slurm-wlm, their state and logs in DIR.
#   one_node_slurm.sh up DIR     prints "SLURM_CONF=..." on its last line
#   one_node_slurm.sh down DIR
# Exit 77 when Slurm cannot run here (not root, not installed, a daemon refuses): the test skips.
set -euo pipefail
action=$1
dir=$2
skip() { echo "one_node_slurm: $*" >&2; exit 77; }

if [ "$action" = down ]; then
  for pid in slurmd slurmctld; do
    [ -f "$dir/$pid.pid" ] && kill "$(cat "$dir/$pid.pid")" 2>/dev/null || true
  done
  exit 0
fi

[ "$(id -u)" -eq 0 ] || skip "needs root to start slurmd"
for tool in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/sbatch; do
  [ -x "$tool" ] || skip "no $tool (Debian: slurm-wlm, munge)"
done
mkdir -p "$dir/state" "$dir/spool"
if ! pgrep -x munged >/dev/null; then
  [ -f /etc/munge/munge.key ] || mungekey -c -f -k /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge
  su -s /bin/sh munge -c /usr/sbin/munged || skip "munged would not start"
fi
host=$(hostname)
cpus=$(( $(nproc) * 4 )) # ranks share cores, as on a laptop: more tasks than CPUs
cat > "$dir/slurm.conf" <<CONF
ClusterName=shardscope
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=$(( 16817 + $$ % 1000 ))
SlurmdPort=$(( 17818 + $$ % 1000 ))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
ReturnToService=2
MpiDefault=none
MinJobAge=600
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
export SLURM_CONF=$dir/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF" || skip "slurmctld would not start: $(tail -3 "$dir/slurmctld.log" 2>/dev/null)"
/usr/sbin/slurmd -f "$SLURM_CONF" || skip "slurmd would not start: $(tail -3 "$dir/slurmd.log" 2>/dev/null)"
for _ in $(seq 1 100); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^idle'; then
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
skip "the node never became idle: $(sinfo 2>&1 | tail -2)"
