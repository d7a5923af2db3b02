#!/usr/bin/env bash
# The Chorus demo: two nodes in a temporary directory. Alice's node writes
# signed events; they travel to Bob's node as an export file; Bob's node
# verifies and stores them and holds the same feed. Usage: demo.sh CHORUS_BIN
set -euo pipefail
bin="${1:?usage: demo.sh PATH_TO_CHORUS}"
work="$(mktemp -d "${TMPDIR:-/tmp}/chorus-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export CHORUS_STORE=   # every command below names its store explicitly

step() { printf '\n== %s\n' "$*"; }
run() {
    printf '$ chorus'; printf ' %q' "$@"; printf '\n'
    "$bin" "$@"
}
ids() { grep -o '"id":"[0-9a-f]*"' | sort; }

alice="$work/alice"
bob="$work/bob"

step "Create two nodes (each: a user key, a device key, and the event binding them)"
run init --store "$alice" --name Alice --device-name alice-phone
run init --store "$bob" --name Bob --device-name bob-laptop

step "Alice edits her profile: each edit is an Ed25519-signed event in her device's feed"
run profile set --store "$alice" bio "Photographer, mostly rooftops"
run profile set --store "$alice" city Lisbon
run profile set --store "$alice" birthday 1991-04-12
run profile set --store "$alice" visibility followers
run log --store "$alice"

step "Move Alice's events to Bob's node through an export file"
run export --store "$alice" "$work/alice.cbor"
run import --store "$bob" "$work/alice.cbor"

step "Bob's node now holds Alice's feeds, verified event by event"
run log --store "$bob"
alice_device="$("$bin" whoami --store "$alice" --json | grep -o '"device":"[0-9a-f]*"' | cut -d'"' -f4)"
if [ "$("$bin" log --store "$alice" --author "$alice_device" --json | ids)" != \
     "$("$bin" log --store "$bob" --author "$alice_device" --json | ids)" ]; then
    echo "FAILED: Bob's copy of Alice's device feed differs" >&2
    exit 1
fi
echo "Alice's device feed is identical on both nodes (same event ids, same order)."

step "Importing the same file again changes nothing: every event is a duplicate"
run import --store "$bob" "$work/alice.cbor"

step "A tampered file is refused whole, with the reason, and Bob's store is unchanged"
before="$("$bin" log --store "$bob" --json | ids)"
# Flip one bit in the middle of the file (inside some event's signed bytes).
size=$(wc -c <"$work/alice.cbor")
cp "$work/alice.cbor" "$work/tampered.cbor"
offset=$((size / 2))
byte=$(od -An -tu1 -j "$offset" -N1 "$work/tampered.cbor" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$work/tampered.cbor" bs=1 seek="$offset" conv=notrunc status=none
if run import --store "$bob" "$work/tampered.cbor"; then
    echo "FAILED: the tampered file was accepted" >&2
    exit 1
fi
[ "$before" = "$("$bin" log --store "$bob" --json | ids)" ] || { echo "FAILED: store changed" >&2; exit 1; }
echo "Refused (exit status 1); Bob's store is unchanged."

step "Done: two nodes, one verified feed"
echo "Demo complete."
