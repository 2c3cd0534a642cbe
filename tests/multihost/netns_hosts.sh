# Sourced by the multi-host scripts: "hosts" made of network namespaces on this machine. Each host
# is a namespace with its own loopback and one veth (eth0) into a bridge that lives in a namespace
# of its own; host h (from 0) has the address 198.18.0.(h+1)/24 (the benchmarking range).
#
#   netns_hosts N [TAG|--by-address]
#
# makes N hosts named TAGh0, TAGh1, ... (TAG defaults to "ch<pid>"), or named by their addresses
# ("198.18.0.1", ...) with --by-address, and lists them in NETNS_NAMES and NETNS_ADDRS. The
# caller removes them with netns_remove (from its EXIT trap). Without root, `ip`, or namespace
# support it prints SKIP and exits 77 (ctest: skipped).

NETNS_NAMES=()
NETNS_ADDRS=()
netns_made=()

netns_skip() {
  echo "SKIP: $*" >&2
  exit 77
}

netns_remove() {
  for ns in "${netns_made[@]}"; do ip netns del "$ns" 2> /dev/null; done
  netns_made=()
}

netns_hosts() {
  local count=$1
  local tag=${2:-ch$$}
  local byaddr=0
  if [ "$tag" = "--by-address" ]; then
    byaddr=1
    tag="ch$$"
  fi
  [ "$(id -u)" -eq 0 ] || netns_skip "network namespaces need root"
  command -v ip > /dev/null || netns_skip "the ip command (iproute2) is missing"
  local sw="${tag}sw"
  ip netns add "$sw" 2> /dev/null || netns_skip "cannot create network namespaces here (ip netns add failed)"
  netns_made+=("$sw")
  ip -n "$sw" link add br0 type bridge || netns_skip "cannot create a bridge in a network namespace"
  ip -n "$sw" link set br0 up
  local h ns addr
  for h in $(seq 0 $((count - 1))); do
    addr="198.18.0.$((h + 1))"
    ns="${tag}h$h"
    if [ $byaddr -eq 1 ]; then
      # Named by address, one run at a time: a namespace left by a run that was killed before
      # its EXIT trap (a ctest timeout) is removed first.
      ns=$addr
      ip netns del "$ns" 2> /dev/null
    fi
    ip netns add "$ns" || { echo "ip netns add $ns failed" >&2; exit 1; }
    netns_made+=("$ns")
    ip link add "${tag}h${h}a" type veth peer name "${tag}h${h}b" || { echo "veth creation failed" >&2; exit 1; }
    ip link set "${tag}h${h}a" netns "$ns"
    ip link set "${tag}h${h}b" netns "$sw"
    ip -n "$ns" link set "${tag}h${h}a" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$sw" link set "${tag}h${h}b" master br0
    ip -n "$sw" link set "${tag}h${h}b" up
    NETNS_NAMES+=("$ns")
    NETNS_ADDRS+=("$addr")
  done
}
