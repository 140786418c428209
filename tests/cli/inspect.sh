#!/usr/bin/env bash
# memtile inspect on real files: text and JSON output, types per file, memory model, error on bad input.
set -euo pipefail
memtile=$1; shared=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$memtile" inspect "$shared/quant/tiny-llama-Q4_K_M.gguf")
grep -q "architecture:  llama" <<<"$out" || fail "architecture missing: $out"
grep -q "Q4_K" <<<"$out" || fail "Q4_K missing"
grep -q "Q6_K" <<<"$out" || fail "Q6_K missing"
grep -q "streamed per generated token" <<<"$out" || fail "memory model missing"
grep -q "moe:           dense" <<<"$out" || fail "moe line missing"

json=$("$memtile" inspect --json "$shared/quant/tiny-llama-Q4_K_M.gguf")
python3 - "$json" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
assert sorted(j["tensor_types"]) == ["F32", "Q4_K", "Q6_K"], j["tensor_types"]
assert j["architecture"] == "llama" and j["moe"] == "dense"
m = j["memory"]
assert 0 < m["streamed_bytes_per_token"] < m["weight_bytes"], m
assert m["kv_bytes_per_token"] == 2 * 2 * 128 * 2, m
assert j["tokenizer"]["model"] == "llama" and j["tokenizer"]["vocab_size"] == 512
PY

# --ctx and --kv-type change the KV figures
k16=$("$memtile" inspect --json --ctx 100 "$shared/quant/tiny-llama-Q8_0.gguf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["memory"]["kv_bytes"])')
k32=$("$memtile" inspect --json --ctx 100 --kv-type f32 "$shared/quant/tiny-llama-Q8_0.gguf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["memory"]["kv_bytes"])')
[ "$k32" -eq $((2 * k16)) ] || fail "f32 KV ($k32) is not twice f16 ($k16)"

# every shared quant file inspects; vocab-only files too
for f in "$shared"/quant/*.gguf "$shared"/vocab/*.gguf; do "$memtile" inspect "$f" >/dev/null || fail "inspect $f"; done

# gen -> inspect: shapes of the preset
"$memtile" gen --arch tiny --type q8_0 -o "$tmp/t.gguf" >/dev/null
"$memtile" inspect --json "$tmp/t.gguf" | python3 -c '
import json,sys; j=json.load(sys.stdin); h=j["hparams"]
assert (h["n_embd"],h["n_layer"],h["n_head"],h["n_head_kv"],h["n_ff"],h["n_vocab"])==(256,2,4,2,768,512), h
assert j["file_type"]=="Q8_0" and sorted(j["tensor_types"])==["F32","Q8_0"], j'

# bad input: clear error, non-zero exit, no crash
head -c 1000 "$shared/quant/tiny-llama-Q8_0.gguf" > "$tmp/trunc.gguf"
if err=$("$memtile" inspect "$tmp/trunc.gguf" 2>&1); then fail "truncated file accepted"; fi
grep -q "trunc.gguf" <<<"$err" || fail "error does not name the file: $err"
if "$memtile" inspect "$tmp/missing.gguf" 2>/dev/null; then fail "missing file accepted"; fi
echo "inspect: ok"
