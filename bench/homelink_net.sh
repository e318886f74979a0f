# Network namespaces joined by shaped veth pairs, for the emulated home-link
# test bed (docs/homelink.md). Sourced by bench/homelink.sh and
# tests/homelink_test.sh; needs root, iproute2 and tc (tbf).
#
#   hl_netns_add NAME            a namespace with lo up, remembered for hl_cleanup_netns
#   hl_link HUB VOL INDEX DOWN_KBIT UP_KBIT
#                                a veth pair HUB(10.77.INDEX.1) <-> VOL(10.77.INDEX.2);
#                                tbf on the hub end's egress at DOWN_KBIT (what the
#                                volunteer downloads), on the volunteer end's at UP_KBIT
#   hl_cleanup_netns             deletes every namespace made here (and so its veths)

HL_NAMESPACES=()

hl_netns_add() {
    if ! ip netns add "$1"; then
        echo "homelink: cannot create network namespace $1 (needs root and CAP_SYS_ADMIN)" >&2
        return 1
    fi
    HL_NAMESPACES+=("$1")
    ip -n "$1" link set lo up
}

# tbf: a bucket of 10 ms of data (at least 4 full frames), a queue of 100 ms.
hl_shape() {
    local ns=$1 dev=$2 kbit=$3
    local burst=$(( kbit * 1000 / 8 / 100 ))
    (( burst < 6056 )) && burst=6056
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "${kbit}kbit" burst "$burst" latency 100ms
}

hl_link() {
    local hub=$1 vol=$2 index=$3 down=$4 up=$5
    local a="hlh${index}x$$" b="hlv${index}x$$"
    a=${a:0:15}; b=${b:0:15}
    ip link add "$a" type veth peer name "$b" || return 1
    ip link set "$a" netns "$hub" && ip link set "$b" netns "$vol" || return 1
    ip -n "$hub" addr add "10.77.$index.1/24" dev "$a" && ip -n "$vol" addr add "10.77.$index.2/24" dev "$b" || return 1
    ip -n "$hub" link set "$a" up && ip -n "$vol" link set "$b" up || return 1
    hl_shape "$hub" "$a" "$down" && hl_shape "$vol" "$b" "$up"
}

hl_cleanup_netns() {
    local ns
    for ns in "${HL_NAMESPACES[@]}"; do
        # Whatever still runs inside goes first, then the namespace (its veths with it).
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    HL_NAMESPACES=()
}

#   hl_uplink HUB ROUTER KBIT    the host's own link: HUB(10.77.0.1) <-> ROUTER(10.77.0.2),
#                                tbf at KBIT each way (0: unshaped); ROUTER forwards
#                                between HUB and every volunteer link
#   hl_route VOL INDEX           VOL's default route through the router, so that
#                                volunteers reach each other (their swarm)
hl_uplink() {
    local hub=$1 router=$2 kbit=$3
    local a="hlua$$" b="hlub$$"
    a=${a:0:15}; b=${b:0:15}
    ip link add "$a" type veth peer name "$b" || return 1
    ip link set "$a" netns "$hub" && ip link set "$b" netns "$router" || return 1
    ip -n "$hub" addr add 10.77.0.1/24 dev "$a" && ip -n "$router" addr add 10.77.0.2/24 dev "$b" || return 1
    ip -n "$hub" link set "$a" up && ip -n "$router" link set "$b" up || return 1
    ip -n "$hub" route add default via 10.77.0.2 || return 1
    ip netns exec "$router" sysctl -qw net.ipv4.ip_forward=1 || return 1
    if (( kbit > 0 )); then
        hl_shape "$hub" "$a" "$kbit" && hl_shape "$router" "$b" "$kbit"
    fi
}

hl_route() {
    ip -n "$1" route add default via "10.77.$2.1"
}
