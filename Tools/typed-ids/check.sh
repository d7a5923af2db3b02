#!/usr/bin/env bash
# Proves that the compiler, not a runtime check, catches an id of one kind
# passed where another kind is expected: each snippet in misuse/ must fail to
# typecheck against the example app's build of `Chorus` with the diagnostic
# its first line names, and correct.swift must typecheck (so a failure is the
# type error, not the set-up). Run after `swift build --package-path
# Examples/ChorusApp`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
app="$root/Examples/ChorusApp"
build="$app/.build/debug"
[ -d "$build/Modules" ] || { echo "no build of Examples/ChorusApp at $build; build it first" >&2; exit 1; }

# The C modules the Swift modules were built against: generated maps under
# .build/debug/<target>.build/, declared ones in the packages' sources.
flags=(-typecheck -I "$build/Modules")
while IFS= read -r map; do flags+=(-Xcc "-fmodule-map-file=$map"); done < <(
    find "$build/" -path "*.build/module.modulemap" -name module.modulemap
    find "$app/.build/checkouts" "$root/Sources" -name module.modulemap)

if ! out="$(swiftc "${flags[@]}" "$here/correct.swift" 2>&1)"; then
    echo "$out" >&2
    echo "typed-ids: the correct snippet does not typecheck; the check's set-up is broken" >&2
    exit 1
fi
failed=0
for snippet in "$here"/misuse/*.swift; do
    expected="$(head -n 1 "$snippet" | sed 's|^// expect: ||')"
    if out="$(swiftc "${flags[@]}" "$snippet" 2>&1)"; then
        echo "typed-ids: $(basename "$snippet") compiled; the compiler must refuse it ($expected)" >&2
        failed=1
    elif ! grep -qF "$expected" <<<"$out"; then
        echo "$out" >&2
        echo "typed-ids: $(basename "$snippet") failed, but not with: $expected" >&2
        failed=1
    fi
done
[ "$failed" = 0 ] && echo "typed-ids: $(ls "$here"/misuse/*.swift | wc -l) misuses refused by the compiler" >&2
exit "$failed"
