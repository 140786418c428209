#!/usr/bin/env bash
# memtile bench, diag and the memory modes end to end on a small synthetic model: row fields and formats, the
# roofline computed against a planted machine profile, --profile / --perf / --cold / --soak reports, SVG
# well-formedness. No check depends on how fast this machine is.
set -euo pipefail
memtile=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export XDG_CACHE_HOME=$tmp/cache
mkdir -p "$tmp/cache/memtile"
# A planted profile: 1 thread 7 GB/s, 2 threads 11 GB/s.
cat > "$tmp/cache/memtile/machine.json" <<'JSON'
{"format": "memtile-machine-profile-1", "sequential_read_gbps": 11.0, "sequential_read_gbps_1_thread": 7.0,
 "threads": 2, "created": "2026-01-01T00:00:00Z", "cpu_model": "planted"}
JSON
"$memtile" gen --arch tiny --type q8_0 --out "$tmp/m.gguf" >/dev/null

"$memtile" bench -m "$tmp/m.gguf" -p 16 -n 8 -t 1,2 -r 2 --json --svg "$tmp/roof.svg" > "$tmp/rows.json"
python3 - "$tmp/rows.json" "$tmp/roof.svg" <<'PY' || fail "bench --json rows"
import json, sys, xml.etree.ElementTree as ET
rows = json.load(open(sys.argv[1]))
assert [(r["threads"], r["test"]) for r in rows] == [(1, "pp16"), (1, "tg8"), (2, "pp16"), (2, "tg8")], rows
for r in rows:
    for k in ["model", "type", "threads", "test", "tokens_per_second", "bytes_per_token", "achieved_gbps", "roofline", "ttft_ms"]:
        assert k in r, k
    assert r["type"] == "Q8_0" and r["model"] == "m.gguf"
    assert r["tokens_per_second"] > 0 and r["bytes_per_token"] > 0 and r["ttft_ms"] > 0
    assert len(r["samples"]) == 2
    assert abs(r["achieved_gbps"] - r["tokens_per_second"] * r["bytes_per_token"] / 1e9) < 1e-9 * max(1, r["achieved_gbps"])
    want = 7.0 if r["threads"] == 1 else 11.0
    assert r["available_gbps"] == want, r
    assert abs(r["roofline"] - r["achieved_gbps"] / want) < 1e-12
    assert r["roofline_source"] == "machine profile"
# Decode streams all weights per token; a 16-token prompt shares them: fewer bytes per token.
assert rows[0]["bytes_per_token"] < rows[1]["bytes_per_token"]
root = ET.parse(sys.argv[2]).getroot()
texts = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
assert "tg8, 2 threads" in texts, texts
PY

# -d: each test after that many tokens already in the cache; the KV rows it reads count in its bytes per token.
"$memtile" bench -m "$tmp/m.gguf" -p 8 -n 4 -d 0,40 -t 1 -r 1 --json > "$tmp/depth.json"
python3 - "$tmp/depth.json" <<'PY' || fail "bench -d rows"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [(r["test"], r["n_depth"]) for r in rows] == [("pp8", 0), ("tg4", 0), ("pp8 @ d40", 40), ("tg4 @ d40", 40)], rows
assert rows[2]["bytes_per_token"] > rows[0]["bytes_per_token"] and rows[3]["bytes_per_token"] > rows[1]["bytes_per_token"]
PY
rc=0; "$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 -d 100 -c 64 -t 1 -r 1 > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" -ne 0 ] && grep -q "depth 100 do not fit the context of 64" "$tmp/err" || fail "bench -d past the context: $(cat "$tmp/err")"

md=$("$memtile" bench -m "$tmp/m.gguf" -p 8 -n 4 -t 1 -r 1)
grep -q "^| model | size | type" <<<"$md" || fail "markdown header: $md"
grep -q "| tg4 |" <<<"$md" || fail "markdown tg row: $md"
csv=$("$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 -t 1 -r 1 --csv)
[ "$(echo "$csv" | wc -l)" -eq 2 ] || fail "csv: one header and one row expected: $csv"
grep -q "tokens_per_second" <<<"${csv%%$'\n'*}" || fail "csv header: $csv"

prof=$("$memtile" bench -m "$tmp/m.gguf" -p 0 -n 8 -t 1 -r 1 --profile)
for s in "decode profile" "| op class |" "matmul Q8_0" "attention" "sampling" "| layer |" "KV-cache reads" \
         "effective bandwidth utilisation"; do
  grep -q "$s" <<<"$prof" || fail "--profile lacks '$s': $prof"
done

perf=$("$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 -t 1 -r 1 --perf)
grep -q "event counters per token" <<<"$perf" || fail "--perf: $perf"
grep -q "page-faults\|context-switches" <<<"$perf" || fail "--perf lacks software events: $perf"
if ! grep -q "| cycles |\|cycles |" <<<"$perf"; then
  grep -q "hardware counters are unavailable here" <<<"$perf" || fail "--perf neither counts cycles nor says why"
fi

cold=$("$memtile" bench -m "$tmp/m.gguf" -p 0 -n 0 -t 1 --cold)
grep -q "| mmap |" <<<"$cold" || fail "--cold lacks the mmap row: $cold"
grep -q "| mmap+prefault |" <<<"$cold" || fail "--cold lacks the prefault row: $cold"

soak=$("$memtile" bench -m "$tmp/m.gguf" -t 1 --soak 3 --svg "$tmp/soak.svg")
grep -q "first 1 s vs last 1 s" <<<"$soak" || fail "--soak summary: $soak"
[ "$(echo "$soak" | grep -cE '^ +[0-9]+ ')" -eq 3 ] || fail "--soak: three samples expected: $soak"
python3 -c "import sys, xml.etree.ElementTree as ET; ET.parse(sys.argv[1])" "$tmp/soak.svg" || fail "soak svg"

# Memory modes give the same tokens.
ref=$("$memtile" run -m "$tmp/m.gguf" --prompt-ids 1,2,3 -n 8 --temp 0 --ids -t 1 2>/dev/null)
for mode in --no-mmap --mlock --prefault --hugepages; do
  out=$("$memtile" run -m "$tmp/m.gguf" --prompt-ids 1,2,3 -n 8 --temp 0 --ids -t 1 $mode 2>/dev/null)
  [ "$out" = "$ref" ] || fail "$mode changed the output"
done
v=$("$memtile" run -m "$tmp/m.gguf" --prompt-ids 1 -n 4 --temp 0 --verbose --hugepages 2>&1 >/dev/null)
grep -q "roofline .* % of 7.00 GB/s\|roofline .* % of 11.00 GB/s" <<<"$v" || fail "run --verbose roofline: $v"
grep -q "memory mode hugepages" <<<"$v" || fail "run --verbose memory mode: $v"

"$memtile" diag --json -m "$tmp/m.gguf" > "$tmp/diag.json"
python3 - "$tmp/diag.json" <<'PY' || fail "diag --json"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ["cpu", "caches", "memory", "huge_pages", "frequency", "thermal", "gpus", "backends", "probe", "warnings", "unavailable"]:
    assert k in d, k
assert d["probe"]["sequential_read_gbps"] == 11.0
assert d["backends"][0]["name"] == "cpu" and d["backends"][0]["compiled"]
assert d["cpu"]["logical_cpus"] >= 1
PY
grep -q "^probe .*11.00 GB/s" <<<"$("$memtile" diag)" || fail "diag text lacks the probe line"
grep -q "^backend    cuda  \(not \)\?compiled in, \(usable device here\|no usable device\)" <<<"$("$memtile" diag)" ||
  fail "diag text lacks the cuda backend line"
"$memtile" --version > "$tmp/version.txt"
grep -q "^  cpu   compiled in .*device present" "$tmp/version.txt" || fail "--version: cpu backend"
grep -q "^  cuda " "$tmp/version.txt" || fail "--version: cuda backend"

# Pinning: a valid mask runs, a bad or short one is an error naming the problem.
"$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 -t 1 -r 1 --cpu-mask 0 --json > /dev/null || fail "bench --cpu-mask 0"
expect_error() {  # expected message, then the command
  local want=$1; shift
  if out=$("$@" 2>&1); then fail "no error from: $* ($out)"; fi
  grep -q "$want" <<<"$out" || fail "unexpected error from $*: $out"
}
expect_error "not a CPU id" "$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 -t 1 --cpu-mask x
expect_error "lists 1 CPUs for 2 threads" "$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 -t 2 --cpu-mask 0

# Without a usable GPU the CUDA verbs say why instead of crashing (on a GPU machine they run).
if ! grep -q "^  cuda .*device present" "$tmp/version.txt"; then
  expect_error "cuda" "$memtile" probe --gpu
  expect_error "cuda" "$memtile" bench -m "$tmp/m.gguf" -p 0 -n 4 --device cuda
fi
expect_error "takes -m" "$memtile" bench -m "$tmp/m.gguf" -n 4 --device cuda --soak 3
echo "bench: ok"
