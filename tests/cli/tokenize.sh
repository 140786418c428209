#!/usr/bin/env bash
# CLI test for `memtile tokenize` / `memtile detokenize`. Usage: tokenize.sh MEMTILE_BINARY SHARED_DIR
set -euo pipefail
bin=$1
vocab=$2/vocab
failures=0

check() {  # check NAME EXPECTED ACTUAL
    if [[ "$2" != "$3" ]]; then
        printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3" >&2
        failures=$((failures + 1))
    fi
}

gpt2=$vocab/ggml-vocab-gpt-2.gguf
spm=$vocab/ggml-vocab-llama-spm.gguf

check "gpt-2 plain" $'15496\t"Hello"\n995\t" world"' "$("$bin" tokenize "$gpt2" "Hello world" --no-bos)"
check "gpt-2 json" '{"ids":[15496,995],"pieces":["Hello"," world"]}' \
    "$("$bin" tokenize "$gpt2" "Hello world" --json)"
check "gpt-2 special not parsed by default" "false" \
    "$(grep -q '"ids":\[50256\]' <<<"$("$bin" tokenize "$gpt2" "<|endoftext|>" --json)" && echo true || echo false)"
check "gpt-2 --parse-special" '{"ids":[50256],"pieces":["<|endoftext|>"]}' \
    "$("$bin" tokenize "$gpt2" "<|endoftext|>" --json --parse-special)"
check "spm adds BOS" $'1\t"<s>"\n15043\t" Hello"' "$("$bin" tokenize "$spm" "Hello")"
check "spm --no-bos" $'15043\t" Hello"' "$("$bin" tokenize "$spm" "Hello" --no-bos)"
check "spm escapes" $'13\t"\\n"\n29908\t"\\""' "$("$bin" tokenize "$spm" $'\n"' --no-bos | tail -n 2)"

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
printf 'Hello world' > "$tmp"
check "--file" $'15496\t"Hello"\n995\t" world"' "$("$bin" tokenize "$gpt2" --file "$tmp")"

check "detokenize gpt-2" "Hello world" "$("$bin" detokenize "$gpt2" 15496 995)"
check "detokenize spm byte tokens" "Hello 🦙" "$("$bin" detokenize "$spm" 1 15043 29871 243 162 169 156)"

if "$bin" tokenize "$vocab/ggml-vocab-bert-bge.gguf" "hi" 2> "$tmp"; then
    echo "FAIL bert vocab was accepted" >&2
    failures=$((failures + 1))
fi
check "bert error" "true" "$(grep -q "unsupported tokenizer model 'bert'" "$tmp" && echo true || echo false)"

if ((failures > 0)); then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "tokenize CLI: all checks passed"
