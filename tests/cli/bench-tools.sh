#!/usr/bin/env bash
# The bench programs that read a model (bench/guarded-main.h): a missing file is one line naming it on stderr and
# exit status 1, not an abort through std::terminate (status 134). Skipped when the bench programs are not built.
set -euo pipefail
memtile=$1
dir=$(dirname "$memtile")/bench
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$dir/bench-decode-roofline" ] || { echo "bench programs not built: skipped"; exit 0; }

missing=$tmp/no-such-model.gguf
check() {  # name, args...
    local name=$1; shift
    local rc=0
    "$dir/$name" "$@" > /dev/null 2> "$tmp/err" || rc=$?
    [ "$rc" -eq 1 ] || fail "$name $*: exit status $rc, expected 1 ($(head -c 300 "$tmp/err"))"
    grep -q "cannot open '$missing'" "$tmp/err" || fail "$name: the error does not name the file: $(head -c 300 "$tmp/err")"
    [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "$name: expected one line on stderr, got: $(cat "$tmp/err")"
}
check bench-decode-roofline --threads 1 "$missing"
check bench-decode-arena "$missing"
check bench-repack-load "$missing"
check bench-decode-prefetch model "$missing"
echo "bench tools: clear errors for a missing model"
