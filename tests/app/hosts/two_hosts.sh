#!/usr/bin/env bash
# A second host for launch tests, on this machine: a network namespace with its own address
# (10.77.N.2, this machine 10.77.N.1 on a veth pair), its own host name, and Debian's sshd
# accepting a key made here. Needs root (ip netns) and openssh-server.
#   two_hosts.sh up DIR     prints "HOST_A HOST_B SSH_OPTIONS" on its last line
#   two_hosts.sh down DIR
# Exit 77 when this machine cannot make the host (not root, no netns, no sshd): the test skips.
set -euo pipefail
action=$1
dir=$2
net=$(( ($$ % 200) + 20 ))
name=shardscope$net

skip() { echo "two_hosts: $*" >&2; exit 77; }

if [ "$action" = down ]; then
  [ -f "$dir/netns" ] || exit 0
  name=$(cat "$dir/netns")
  if [ -f "$dir/sshd.pid" ]; then kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true; fi
  ip netns pids "$name" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip link del "ssv${name#shardscope}" 2>/dev/null || true
  ip netns del "$name" 2>/dev/null || true
  exit 0
fi

[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
[ -x /usr/sbin/sshd ] || skip "no /usr/sbin/sshd (Debian: openssh-server)"
command -v ip >/dev/null || skip "no ip (Debian: iproute2)"
mkdir -p "$dir" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$dir/user_key"
cp "$dir/user_key.pub" "$dir/authorized_keys"
a=10.77.$net.1
b=10.77.$net.2
ip netns add "$name" || skip "cannot add a network namespace"
echo "$name" > "$dir/netns" # "ssv<net>" is its veth: interface names hold 15 characters
ip link add "ssv$net" type veth peer name eth0 netns "$name" || skip "cannot add a veth pair"
ip addr add "$a/24" dev "ssv$net"
ip link set "ssv$net" up
ip netns exec "$name" ip addr add "$b/24" dev eth0
ip netns exec "$name" ip link set eth0 up
ip netns exec "$name" ip link set lo up
cat > "$dir/sshd_config" <<CONF
Port 22
ListenAddress $b
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PasswordAuthentication no
PermitRootLogin prohibit-password
PidFile $dir/sshd.pid
StrictModes no
AllowTcpForwarding yes
UsePAM no
CONF
# Its own host name too, so MPI sees two nodes.
ip netns exec "$name" unshare --uts sh -c "hostname shardscope-host-b; exec /usr/sbin/sshd -f '$dir/sshd_config' -E '$dir/sshd.log'" \
  || skip "sshd would not start: $(cat "$dir/sshd.log" 2>/dev/null)"
options="-i $dir/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
for _ in $(seq 1 50); do
  # shellcheck disable=SC2086
  if ssh $options -o BatchMode=yes -o ConnectTimeout=2 "root@$b" true 2>/dev/null; then
    echo "$a $b $options"
    exit 0
  fi
  sleep 0.1
done
skip "sshd in the namespace does not answer: $(cat "$dir/sshd.log" 2>/dev/null)"
