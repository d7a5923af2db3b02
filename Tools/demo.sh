#!/usr/bin/env bash
# The Chorus demo: a small social network on five nodes in a temporary
# directory. A shop node holds the coin issuer key; an always-on relay runs
# `chorus serve`; Alice has a phone and a tablet (two devices of one user);
# Bob has a laptop. They write profiles, pictures, follows, likes, a chat and
# coin events, and sync over encrypted TCP on loopback: through the relay,
# and once directly between Alice's devices. At the end every node shows the
# same projections and the same digest, or the demo fails.
# With CHORUS_DEMO_SERVED=1 every node also runs `chorus serve` from its
# creation on, so every later command on it goes through its local API; the
# output is the same (a test compares the two).
# Usage: demo.sh CHORUS_BIN
set -euo pipefail
bin="${1:?usage: demo.sh PATH_TO_CHORUS}"
served_mode="${CHORUS_DEMO_SERVED:-0}"
work="$(mktemp -d "${TMPDIR:-/tmp}/chorus-demo.XXXXXX")"
servers=()
owners=()                  # served mode: each node's own server
declare -A owner_port=()   # served mode: the sync port of each node's own server
cleanup() {
    # SIGTERM: a background job of a script ignores SIGINT.
    for pid in "${servers[@]}" "${owners[@]}"; do [ "$pid" = owned ] || kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${servers[@]}" "${owners[@]}"; do [ "$pid" = owned ] || wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
export CHORUS_STORE=   # every command below names its store explicitly

step() { printf '\n== %s\n' "$*"; }
run() {
    printf '$ chorus'; printf ' %q' "$@"; printf '\n'
    "$bin" "$@"
}
fail() { echo "FAILED: $*" >&2; exit 1; }
# Runs a command that prints an id on its first line; stores the id in $1.
capture() {
    local var="$1" out
    shift
    out="$(run "$@")"
    printf '%s\n' "$out"
    printf -v "$var" '%s' "$(printf '%s\n' "$out" | sed -n 2p)"
}
# Runs a command that must be refused (exit status 1).
refused() {
    local status=0
    run "$@" || status=$?
    [ "$status" = 1 ] || fail "expected exit status 1 (refused), got $status"
    echo "(refused as expected, exit status 1)"
}
# `sed -n 1p`, not `head`: head leaves at once, and under pipefail the grep
# it cut off would fail the step.
json_field() { grep -o "\"$1\":\"[0-9a-f]*\"" | sed -n 1p | cut -d'"' -f4; }
# A tiny PNG header with the given width and height (enough to be recognised).
png() {
    local w h
    w="$(printf '\\x%02x' "$2")" h="$(printf '\\x%02x' "$3")"
    printf "\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00\\rIHDR\\x00\\x00\\x00${w}\\x00\\x00\\x00${h}\\x08\\x02\\x00\\x00\\x00" >"$1"
}

shop="$work/shop" relay="$work/relay" phone="$work/alice-phone" tablet="$work/alice-tablet" laptop="$work/bob-laptop"
nodes=("$shop" "$relay" "$phone" "$tablet" "$laptop")
# Starts `chorus serve` on a store (port 0: the kernel picks a free port) and
# sets $1 to the port it listens on; the server's log goes to $work/NAME.log.
serve() {
    local var="$1" store="$2" log="$work/$(basename "$2").log" port="" i
    if [ -n "${owner_port[$store]:-}" ]; then
        # Served mode: the node's own server already serves sync.
        servers+=("owned")
        printf -v "$var" '%s' "${owner_port[$store]}"
        return
    fi
    "$bin" serve --store "$store" --listen 127.0.0.1:0 2>"$log" &
    servers+=("$!")
    for i in $(seq 1 100); do
        port="$(grep -o 'listening on 127.0.0.1:[0-9]*' "$log" 2>/dev/null | head -n 1 | cut -d: -f2 || true)"
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || fail "chorus serve did not start: $(cat "$log")"
    printf -v "$var" '%s' "$port"
}
# Stops the most recent server (SIGTERM: it finishes its sessions and closes the store).
stop_server() {
    local pid="${servers[-1]}"
    unset 'servers[-1]'
    [ "$pid" = owned ] && return
    kill -TERM "$pid"
    wait "$pid" || fail "chorus serve did not stop cleanly"
}
# Served mode: starts the node's own server, which stays up to the end.
own() {
    [ "$served_mode" = 1 ] || return 0
    local owned_port
    serve owned_port "$1"
    owner_port[$1]="$owned_port"
    owners+=("${servers[-1]}")
    unset 'servers[-1]'
}
# Syncs each named store with the relay, both ways.
sync_relay() {
    local store
    for store in "$@"; do run sync --store "$store" "127.0.0.1:$relay_port"; done
}

step "A test network: the shop node creates the coin issuer key"
run init --store "$shop" --name Shop --device-name shop-server
capture issuer issuer create --store "$shop"
own "$shop"

step "An operator's always-on relay joins the shop's network (its network.json: issuer and network key) and serves"
run init --store "$relay" --device-name relay --network "$shop/network.json"
serve relay_port "$relay"
echo "relay listening on 127.0.0.1:$relay_port (encrypted: Noise XXpsk3 with the network key)"

step "Alice and Bob join the same network with the shop's invite (one line: network key, issuers, slot prices)"
invite="$("$bin" network invite --store "$shop")"
run init --store "$phone" --name Alice --device-name alice-phone --network "$invite"
run init --store "$laptop" --name Bob --device-name bob-laptop --network "$invite"
own "$phone"
own "$laptop"
alice="$("$bin" whoami --store "$phone" --json | json_field user)"
bob="$("$bin" whoami --store "$laptop" --json | json_field user)"
phone_device="$("$bin" whoami --store "$phone" --json | json_field device)"
run network show --store "$laptop"

step "Alice adds her tablet: a device-only store, bound from the phone (which holds the user key)"
run init --store "$tablet" --user "$alice" --device-name alice-tablet --network "$shop/network.json" | tee "$work/tablet-init.txt"
tablet_device="$("$bin" whoami --store "$tablet" --json | json_field device)"
own "$tablet"
proof="$(grep -o -- '--proof [0-9a-f]*' "$work/tablet-init.txt" | cut -d' ' -f2)"
run device add --store "$phone" "$tablet_device" --proof "$proof" --name alice-tablet
sync_relay "$phone" "$tablet"
run query devices --store "$tablet"

step "Profiles: each edit is a signed event in the editing device's feed"
run profile set --store "$phone" bio "Photographer, mostly rooftops"
run profile set --store "$tablet" city Lisbon
run profile set --store "$laptop" bio "Climber"

step "Alice posts three pictures and drags them into her own order"
png "$work/roof.png" 4 3; png "$work/bridge.png" 5 3; png "$work/tram.png" 6 4
capture roof picture add --store "$phone" "$work/roof.png" --caption "Rooftop at dusk"
capture bridge picture add --store "$phone" "$work/bridge.png" --caption "Bridge"
capture tram picture add --store "$phone" "$work/tram.png" --caption "Tram 28"
run picture move --store "$phone" "$tram" --first
run picture move --store "$phone" "$roof" --after "$bridge"
run picture caption --store "$phone" "$bridge" "Bridge in the fog"
run profile set --store "$phone" avatar "$roof"
run query pictures --store "$phone"

step "The nodes sync through the relay (events and picture blobs, both ways)"
sync_relay "$phone" "$laptop" "$tablet" "$phone"

step "Follows and likes"
run follow --store "$laptop" "$alice"
run like --store "$laptop" "$roof"
run follow --store "$tablet" "$bob"
run query feed --store "$laptop"

step "A chat: Alice creates it with Bob; messages may carry pictures"
capture chat chat create --store "$phone" --title "Rooftops" --member "$bob"
capture first_message chat send --store "$phone" "$chat" --text "Look at this one" --picture "$roof"
sync_relay "$phone" "$laptop"
capture reply chat send --store "$laptop" "$chat" --text "Wow. Which roof?"
run chat read --store "$laptop" "$chat" "$first_message"
sync_relay "$laptop" "$phone"
run query chat --store "$phone" "$chat" --limit 1
older="$("$bin" query chat --store "$phone" "$chat" --limit 1 --json | grep -o '"older":"[0-9a-f]*"' | cut -d'"' -f4)"
run query chat --store "$phone" "$chat" --limit 1 --before "$older"

step "The chat is end-to-end encrypted: the relay stores and serves it but reads none of it"
run query chat --store "$relay" "$chat"
echo "Alice's tablet holds the chat key too (wrapped to each of her devices), so it reads everything:"
sync_relay "$tablet"
run query chat --store "$tablet" "$chat"
png "$work/secret.png" 3 2
capture photo_message chat send --store "$laptop" "$chat" --image "$work/secret.png" --text "A photo only you two can see"
sync_relay "$laptop" "$phone"
run chat attachment --store "$phone" "$photo_message" --output "$work/received.png"
cmp "$work/secret.png" "$work/received.png" || fail "the picture sent inside the chat did not decrypt to the same bytes"

step "Alice buys 500 coins; the store delivers the purchase twice; the receipt counts once"
sync_relay "$shop"
run coins credit --store "$shop" "$alice" 500 --receipt GPA.1234-5678 --device "$phone_device" --product coins_500
refused coins credit --store "$shop" "$alice" 500 --receipt GPA.1234-5678 --device "$phone_device" --product coins_500
sync_relay "$shop" "$phone"
run query balance --store "$phone"

step "Coins move, get spent and given, and unlock a slot; nothing beyond a device's rights"
run coins move --store "$phone" "$tablet_device" 100

step "Alice's devices sync directly with each other: the tablet serves for a moment, the phone connects"
serve tablet_port "$tablet"
run sync --store "$phone" "127.0.0.1:$tablet_port"
stop_server
run peers --store "$phone"
run coins spend --store "$tablet" 30 --for "sticker pack"
refused coins spend --store "$tablet" 1000 --for "more than this device holds"
run coins give --store "$phone" "$bob" 50 --note "for the climbing photos"
run slot unlock --store "$phone" 1
run slot set --store "$phone" 1 "$roof"
run query slots --store "$phone"

step "Alice deletes the rooftop picture: avatar, slot, Bob's like and the chat message all let go of it"
run picture delete --store "$phone" "$roof"
run query profile --store "$phone"
run query slots --store "$phone"
run query likes --store "$phone" "$roof"
run query chat --store "$phone" "$chat"

step "Final round through the relay, each node in turn, twice so everyone sees everything"
sync_relay "$shop" "$laptop" "$tablet" "$phone" "$shop" "$laptop" "$tablet" "$phone"
stop_server

step "Bob's laptop sees the same social network"
run query profile --store "$laptop" "$alice"
run query pictures --store "$laptop" "$alice"
run query slots --store "$laptop" "$alice"
run query balance --store "$laptop" "$alice"
run query balance --store "$laptop"
run query likes --store "$laptop" "$roof"
run query chat --store "$laptop" "$chat"
run query no-effect --store "$laptop"

step "Every node's projection digest"
reference=""
for node in "${nodes[@]}"; do
    digest="$("$bin" query digest --store "$node")"
    printf '%-14s %s\n' "$(basename "$node")" "$digest"
    [ -n "$reference" ] || reference="$digest"
    [ "$digest" = "$reference" ] || fail "$(basename "$node") has a different digest"
done
run rebuild --store "$laptop"
[ "$("$bin" query digest --store "$laptop")" = "$reference" ] || fail "a rebuild from the log changed the digest"
echo "All five nodes agree, and a rebuild from the log gives the same digest."

step "An auditor replays Alice's phone store: is it intact, and where did every coin go?"
replay="$(dirname "$bin")/chorus-replay"
printf '$ chorus-replay verify --store %q\n' "$phone"
"$replay" verify --store "$phone" || fail "chorus-replay verify found problems in an honest store"
printf '$ chorus-replay audit coins %s --store %q\n' "$alice" "$phone"
audit="$("$replay" audit coins "$alice" --store "$phone")" || fail "the coin audit found a broken invariant"
printf '%s\n' "$audit"
# Matched in the shell, not by `printf | grep -q`: grep leaves at its first
# match, and under pipefail the printf it cut off fails the check.
[[ "$audit" == *"NO EFFECT duplicate_receipt"* ]] || fail "the twice-delivered purchase is not shown as counted once"
echo "Every coin traces to its receipt; the purchase delivered twice was counted once."

step "Done: five nodes, one social network, synced over encrypted TCP"
echo "Demo complete."
