#!/usr/bin/env bash
# convert --from hf (vocab only, on the shared GPT-2 tokenizer) and quantize on a tiny generated model.
# Usage: convert.sh MEMTILE SHARED_DIR
set -euo pipefail
bin=$1
shared=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -q "50257 tokens" <<<"$("$bin" convert --from hf "$shared/hf/gpt2" --vocab-only --out "$tmp/gpt2-vocab.gguf")"
out=$("$bin" tokenize "$tmp/gpt2-vocab.gguf" "Hello world" 2>&1 || true)
grep -q "15496" <<<"$out" || { echo "unexpected tokenize output: $out"; exit 1; }

# A folder without weights cannot be converted as a model: the error names what is missing.
if "$bin" convert --from hf "$shared/hf/tinyllama-1.1b-chat" --out "$tmp/x.gguf" 2> "$tmp/err"; then
    echo "converting a folder without weights should fail"; exit 1
fi
grep -q "safetensors" "$tmp/err"

# Unsupported architecture named in the error.
mkdir -p "$tmp/neox"
echo '{"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"}' > "$tmp/neox/config.json"
if "$bin" convert --from hf "$tmp/neox" --out "$tmp/y.gguf" 2> "$tmp/err"; then exit 1; fi
grep -q "GPTNeoXForCausalLM" "$tmp/err"

"$bin" gen --arch tiny --type f32 --out "$tmp/tiny.gguf" > /dev/null
"$bin" quantize "$tmp/tiny.gguf" "$tmp/tiny-q4km.gguf" q4_k_m --threads 2 > "$tmp/table"
grep -q "blk.0.attn_q.weight" "$tmp/table"
grep -q "Q4_K_M" "$tmp/table"
grep -qi "q4_k" <<<"$("$bin" inspect "$tmp/tiny-q4km.gguf")"
if "$bin" quantize "$tmp/tiny.gguf" "$tmp/z.gguf" q3_k_m 2> "$tmp/err"; then exit 1; fi
grep -qi "file type" "$tmp/err"
echo ok
