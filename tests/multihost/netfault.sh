#!/usr/bin/env bash
# Network faults between the namespace hosts of tests/multihost/netns_run.sh, set in its switch
# (a Linux bridge in a namespace of its own) with nftables and tc, so that packets vanish on the
# wire between hosts as they would in a switch or a cable: no host's stack sees anything but the
# fault. Run by a rank of the job (netns_run.sh exports NETNS_TAG), or by anyone who knows the tag.
#
#   netfault.sh loss PCT            drop PCT% of the packets between hosts, both ways, at random
#   netfault.sh blackhole H         drop every packet to and from host H (no RST, no ICMP)
#   netfault.sh reset H             host H answers every TCP packet that reaches it with a reset
#                                   (as after a reboot, or from a middlebox); others pass
#   netfault.sh corrupt PERMILLE    flip 16 bits of the payload of PERMILLE in 1000 TCP packets over
#                                   1000 bytes between hosts; the TCP checksum is not redone, and
#                                   over these veths (checksum offload) nothing checks it: the bytes
#                                   reach the receiver changed, as from a faulty NIC or switch
#   netfault.sh throttle H RATE     queue traffic to and from host H at RATE (tc's units: 20mbit)
#   netfault.sh kill-host           from a rank of a host: blackhole that host, then SIGKILL every
#                                   process of it (its PID namespace) but the namespace's init
#   netfault.sh stats               print what the faults dropped or reset so far
#   netfault.sh clear               remove every fault
#
# Hosts are numbered as in netns_run.sh; host H has address 198.18.0.(H+1). Needs NETNS_TAG, root,
# `ip`, `nft` and `tc` (tools/setup.sh installs nftables); exits 77 without them.
set -euo pipefail

tag=${NETNS_TAG:?netfault.sh needs NETNS_TAG (set by netns_run.sh)}
sw="${tag}sw"
for tool in ip nft tc; do
  command -v "$tool" > /dev/null || { echo "netfault.sh: '$tool' is not installed (tools/setup.sh deps)" >&2; exit 77; }
done
insw() { ip netns exec "$sw" "$@"; }
addr() { echo "198.18.0.$(($1 + 1))"; }

# One table in the switch's bridge family holds every packet fault; its forward chain sees each
# frame that crosses between two hosts' ports.
table() {
  insw nft list table bridge chorusfault > /dev/null 2>&1 && return
  insw nft add table bridge chorusfault
  insw nft add chain bridge chorusfault forward '{ type filter hook forward priority 0; policy accept; }'
}

case "${1:-}" in
  loss)
    pct=${2:?loss PCT}
    table
    insw nft add rule bridge chorusfault forward ether type ip numgen random mod 100 '<' "$pct" counter drop
    ;;
  corrupt)
    pm=${2:?corrupt PERMILLE}
    table
    insw nft add rule bridge chorusfault forward ether type ip ip protocol tcp ip length '>' 1000 \
      numgen random mod 1000 '<' "$pm" @ih,512,16 set @ih,512,16 '^' 0xffff counter
    ;;
  blackhole)
    a=$(addr "${2:?blackhole H}")
    table
    insw nft add rule bridge chorusfault forward ip saddr "$a" counter drop
    insw nft add rule bridge chorusfault forward ip daddr "$a" counter drop
    ;;
  reset)
    # In host H's own namespace: this kernel's bridge family cannot reject.
    h="${tag}h${2:?reset H}"
    ip netns exec "$h" nft add table inet chorusfault
    ip netns exec "$h" nft add chain inet chorusfault input '{ type filter hook input priority 0; policy accept; }'
    ip netns exec "$h" nft add rule inet chorusfault input iifname eth0 meta l4proto tcp counter reject with tcp reset
    ;;
  stats)
    for ns in "$sw" $(ip netns list | awk '{print $1}' | grep "^${tag}h"); do
      ip netns exec "$ns" nft list table bridge chorusfault 2> /dev/null | grep -o "[a-z ]*counter packets [0-9]*.*" \
        | sed "s/^/$ns: /" || true
      ip netns exec "$ns" nft list table inet chorusfault 2> /dev/null | grep -o "counter packets [0-9]*.*" \
        | sed "s/^/$ns: /" || true
    done
    ;;
  throttle)
    h=${2:?throttle H RATE}
    rate=${3:?throttle H RATE}
    # Egress of the switch's port toward host H, and of host H's own interface: both directions.
    insw tc qdisc replace dev "${tag}h${h}b" root tbf rate "$rate" burst 64kb latency 200ms
    ip netns exec "${tag}h${h}" tc qdisc replace dev eth0 root tbf rate "$rate" burst 64kb latency 200ms
    ;;
  kill-host)
    h=${NETNS_HOST:?kill-host runs in a rank of the host to lose}
    "$0" blackhole "$h"
    # Everything of this host but its init (pid 1, which SIGKILL from inside cannot end) and this
    # shell; then this shell.
    kill -KILL -1 2> /dev/null || true
    kill -KILL $$
    ;;
  clear)
    insw nft delete table bridge chorusfault 2> /dev/null || true
    for ns in $(ip netns list | awk '{print $1}' | grep "^${tag}h"); do
      ip netns exec "$ns" nft delete table inet chorusfault 2> /dev/null || true
    done
    for port in $(insw ls /sys/class/net); do
      case "$port" in "${tag}h"*b) insw tc qdisc del dev "$port" root 2> /dev/null || true ;; esac
    done
    for ns in $(ip netns list | awk '{print $1}' | grep "^${tag}h"); do
      ip netns exec "$ns" tc qdisc del dev eth0 root 2> /dev/null || true
    done
    ;;
  *)
    sed -n '2,21p' "$0" >&2
    exit 2
    ;;
esac
