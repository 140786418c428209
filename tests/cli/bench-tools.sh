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

# The phase-matched roofline (--phase-rounds) on a tiny synthetic model: one row per (threads, repack mode), its
# fields numeric, positive and finite, as many per-burst ratios as rounds, the median inside its range, the
# slot's variants named (the plain read among them), and the whole-run columns equal to the first table's.
"$memtile" gen --arch tiny --type q8_0 --out "$tmp/m.gguf" > /dev/null
"$dir/bench-decode-roofline" --threads 1,2 --tg 4 --reps 1 --no-pp --repack off,on --phase-rounds 3 --phase-tg 4 \
    --read-mib 64 "$tmp/m.gguf" > "$tmp/phase.md" 2> "$tmp/err" || fail "bench-decode-roofline --phase-rounds: $(cat "$tmp/err")"
python3 - "$tmp/phase.md" <<'PY' || fail "phase-matched table: $(cat "$tmp/phase.md")"
import math, re, sys
text = open(sys.argv[1]).read()
first, _, second = text.partition("Phase-matched roofline")
assert second, "no phase-matched table"
assert "one pass of 64 MiB each, same threads as the decode" in second
def rows(part):
    lines = [l for l in part.splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "").strip()) == {"-"}
    return [dict(zip(head, [c.strip() for c in l.strip("|").split("|")])) for l in lines[2:]]
old, new = rows(first), rows(second)
assert len(old) == 4 and len(new) == 4, (len(old), len(new))
def num(x):
    v = float(x)
    assert math.isfinite(v) and v > 0, x
    return v
def med_range(x):
    m = re.fullmatch(r"\**([0-9.]+) \[([0-9.]+)-([0-9.]+)\]\**", x)
    assert m, x
    med, lo, hi = (num(g) for g in m.groups())
    assert lo <= med <= hi, x
    return med, lo, hi
seen = set()
for r in new:
    key = (r["threads"], r["repack"])
    seen.add(key)
    assert r["rounds x tokens"] == "3 x 4", r
    assert "plain" in [v.strip() for v in r["slot read variants"].split(",")], r
    for k in ["clock GHz (slots)", "slot read GB/s", "burst tok/s", "ratio ÷ mean adjacent read", "÷ max adjacent read", "÷ mean adjacent plain read",
              "÷ mean adjacent read, per CPU-second"]:
        med_range(r[k])
    ghz = med_range(r["clock GHz (slots)"])[0]
    assert ghz == 0 or 0.2 < ghz < 8, r  # a core clock, not a count of folded adds
    each = [num(v) for v in r["ratio per burst"].split()]
    assert len(each) == 3, r
    med, lo, hi = med_range(r["ratio ÷ mean adjacent read"])
    assert abs(sorted(each)[1] - med) <= 0.006 and abs(min(each) - lo) <= 0.006, r
    assert med_range(r["÷ max adjacent read"])[0] <= med + 1e-9, r
    o = [x for x in old if (x["threads"], x["repack"]) == key]
    assert len(o) == 1, key
    assert r["whole-run tg ÷ best read"] == o[0]["tg ÷ best read"], (r, o)
    assert r["whole-run tg ÷ plain read"] == o[0]["tg ÷ plain read"], (r, o)
assert seen == {("1", "off"), ("1", "on"), ("2", "off"), ("2", "on")}, seen
PY
rc=0
"$dir/bench-decode-roofline" --phase-rounds -1 "$tmp/m.gguf" > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "bench-decode-roofline --phase-rounds -1: exit status $rc"

# --split: one phase-matched row per hand-out, named in the repack column, with the first table's whole-run figures.
"$dir/bench-decode-roofline" --threads 2 --tg 4 --reps 1 --no-pp --repack on --phase-rounds 2 --phase-tg 4 \
    --read-mib 64 --split i,r4 "$tmp/m.gguf" > "$tmp/split.md" 2> "$tmp/err" || fail "bench-decode-roofline --split: $(cat "$tmp/err")"
python3 - "$tmp/split.md" <<'PY' || fail "--split table: $(cat "$tmp/split.md")"
import sys
first, _, second = open(sys.argv[1]).read().partition("Phase-matched roofline")
rows = [[c.strip() for c in l.strip("|").split("|")] for l in second.splitlines() if l.startswith("| ")][1:]
old = [[c.strip() for c in l.strip("|").split("|")] for l in first.splitlines() if l.startswith("| ")][1:]
assert [r[2] for r in rows] == ["on i", "on r4"], rows
assert all(r[-2:] == [old[0][-3], old[0][-2]] for r in rows), (rows, old)
PY
rc=0
"$dir/bench-decode-roofline" --phase-rounds 1 --split r0 "$tmp/m.gguf" > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "bench-decode-roofline --split r0: exit status $rc"

# bench-pool-trace: a table per hand-out, every kind of call of a llama-style model recognized, the same tokens.
if [ -x "$dir/bench-pool-trace" ]; then
    "$dir/bench-pool-trace" --threads 2 --tg 3 --rounds 2 --split i,r2 "$tmp/m.gguf" > "$tmp/trace.md" 2> "$tmp/err" ||
        fail "bench-pool-trace: $(cat "$tmp/err")"
    grep -q "^split i$" "$tmp/trace.md" && grep -q "^split r2$" "$tmp/trace.md" || fail "bench-pool-trace: $(cat "$tmp/trace.md")"
    for k in "q/k/v" attention o gate/up down output; do
        [ "$(grep -c "^| $k | [0-9.]* | " "$tmp/trace.md")" -eq 2 ] || fail "bench-pool-trace: no '$k' rows: $(cat "$tmp/trace.md")"
    done
    ! grep -q "TOKENS DIFFER\|unexpected call count" "$tmp/trace.md" || fail "bench-pool-trace: $(cat "$tmp/trace.md")"
    check bench-pool-trace "$missing"
fi
# bench-attention: a small run prints its line; bad arguments are one error naming the option, exit status 1.
if [ -x "$dir/bench-attention" ]; then
    out=$("$dir/bench-attention" --depth 40 --layers 2 --heads 4 --kv-heads 2 --reps 2) || fail "bench-attention: $out"
    grep -q "^attention: [0-9.]* ms per step" <<<"$out" || fail "bench-attention output: $out"
    for args in "--depth x" "--depth 0" "--heads 6 --kv-heads 4" "--kv-type q8" "--depth"; do
        rc=0; "$dir/bench-attention" $args > /dev/null 2> "$tmp/err" || rc=$?
        [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "bench-attention $args: status $rc, $(cat "$tmp/err")"
    done
fi
echo "bench tools: clear errors for a missing model; the phase-matched roofline table is complete"
