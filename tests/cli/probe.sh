#!/usr/bin/env bash
# memtile probe: JSON shape, machine profile storage, SVG well-formedness, and agreement (within 15 %) of the
# sequential read with an independent STREAM-style C program built here. The agreement check is the one
# timing-based check of the suite (issue 6 asks for it): both programs run back to back, best of several passes,
# and the comparison is retried because the machine is shared (ctest runs it alone: RUN_SERIAL).
set -euo pipefail
memtile=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export XDG_CACHE_HOME=$tmp/cache

"$memtile" probe --quick --threads 2 --json --save --svg "$tmp/probe.svg" > "$tmp/probe.json"
python3 - "$tmp/probe.json" "$tmp/cache/memtile/machine.json" "$tmp/probe.svg" <<'PY' || fail "probe output"
import json, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
assert j["sequential_read_gbps"] > 0, j
assert j["threads"] == 2
tests = {(b["test"], b["threads"]) for b in j["bandwidth"]}
for t in ["read", "read_best", "copy", "triad", "random", "hotspot", "tile2d", "random_4k_pages", "random_2m_pages"]:
    for n in (1, 2):
        assert (t, n) in tests, (t, n)
assert all(b["gbps"] > 0 for b in j["bandwidth"])
# read_best is the fastest read variant, named in its note; sequential_read_gbps is the best of read and read_best.
best = {b["threads"]: b for b in j["bandwidth"] if b["test"] == "read_best"}
variants = {(v["variant"], v["threads"]) for v in j["read_variants"]}
assert ("plain", 1) in variants and ("plain", 2) in variants and len(variants) >= 20, variants
assert best[2]["note"].split(" (")[0] in {v for v, _ in variants}, best[2]["note"]
assert j["sequential_read_gbps"] >= j["sequential_read_plain_gbps"] > 0, j
assert all(b["ns_per_access"] > 0 for b in j["bandwidth"] if b["test"].startswith("random"))
lad = j["latency_ladder"]
assert len(lad) >= 10 and lad[0]["bytes"] == 4096
assert all(a["bytes"] < b["bytes"] for a, b in zip(lad, lad[1:]))
assert all(p["ns"] > 0 for p in lad)
prof = json.load(open(sys.argv[2]))
assert prof["sequential_read_gbps"] == j["sequential_read_gbps"] and prof["format"] == "memtile-machine-profile-1"
root = ET.parse(sys.argv[3]).getroot()
assert root.tag.endswith("svg"), root.tag
assert len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) == 1
PY

# --quick alone does not overwrite the profile.
before=$(cat "$tmp/cache/memtile/machine.json")
"$memtile" probe --quick --threads 1 > "$tmp/human.txt"
grep -q "latency ladder" "$tmp/human.txt" || fail "human output lacks the ladder"
grep -q "machine profile not written" "$tmp/human.txt" || fail "--quick wrote the profile"
[ "$before" = "$(cat "$tmp/cache/memtile/machine.json")" ] || fail "--quick changed the profile"

cc -O2 -o "$tmp/stream-check" "$here/stream-check.c" || fail "cannot build stream-check.c"
# The plain loop is compared (the variants add prefetch and 2 MiB pages, which a plain C loop does not have).
# On these VMs the read rate of a fresh buffer differs between processes (by up to ~25 % with 1 thread here,
# and bimodally, ~28 vs ~45 GB/s, with 2), seemingly by where its pages land, for all of its passes: the two
# programs agree only when both land alike, so up to 8 attempts, each a fresh pair of processes.
ok=0
for attempt in 1 2 3 4 5 6 7 8; do
  ours=$("$memtile" probe --quick --threads 1 --no-save --stream-mib 512 --json |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["sequential_read_plain_gbps_1_thread"])')
  theirs=$("$tmp/stream-check" 512 5 2>/dev/null)
  ratio=$(python3 -c "print($ours / $theirs)")
  echo "attempt $attempt: probe $ours GB/s, stream-check $theirs GB/s, ratio $ratio"
  if python3 -c "import sys; sys.exit(0 if 0.85 <= $ratio <= 1.15 else 1)"; then ok=1; break; fi
  sleep 2
done
[ $ok -eq 1 ] || fail "probe's sequential read disagrees with stream-check by more than 15 %"
echo "probe: ok"
