#!/usr/bin/env bash
# memtile run end to end: llama2.c import, greedy generation, ids output, determinism, bad input.
set -euo pipefail
memtile=$1; shared=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$memtile" convert --from llama2c "$shared/models/stories260K.bin" --out "$tmp/s.gguf" >/dev/null
a=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 40 --temp 0 --ids -t 1 2>/dev/null)
b=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 40 --temp 0 --ids -t 2 2>/dev/null)
[ "$(echo "$a" | wc -l)" -eq 40 ] || fail "expected 40 ids, got: $a"
[ "$a" = "$b" ] || fail "threads 1 and 2 differ"
# Empty prompt starts from BOS alone: same as --prompt-ids 1 (BOS of the placeholder vocabulary).
c=$("$memtile" run -m "$tmp/s.gguf" -p "" -n 40 --temp 0 --ids 2>/dev/null)
[ "$a" = "$c" ] || fail "empty prompt differs from BOS"
# Same seed, same output when sampling
s1=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 30 --temp 1 --seed 5 --ids 2>/dev/null)
s2=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 30 --temp 1 --seed 5 --ids 2>/dev/null)
[ "$s1" = "$s2" ] || fail "same seed gave different tokens"
# n = 0 processes the prompt and generates nothing
z=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1,5,6 -n 0 --ids 2>/dev/null)
[ -z "$z" ] || fail "n=0 generated: $z"
# verbose prints timings and tokens/s
v=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 5 --temp 0 --verbose 2>&1 >/dev/null)
grep -q "time to first token" <<<"$v" || fail "--verbose lacks time to first token: $v"
grep -q "tok/s" <<<"$v" || fail "--verbose lacks tok/s: $v"
# errors: unknown token id, context overflow
if err=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1,9999 -n 1 2>&1); then fail "unknown id accepted"; fi
grep -q "outside the vocabulary" <<<"$err" || fail "bad error for unknown id: $err"
if err=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1,2,3,4,5 --ctx 4 -n 1 2>&1); then fail "overflow accepted"; fi
grep -q "context" <<<"$err" || fail "bad error for context overflow: $err"
# --gpu-layers only with --device cuda; without a usable GPU, --device cuda names why (on a GPU machine it runs)
if err=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 1 --gpu-layers 2 2>&1); then fail "--gpu-layers on cpu"; fi
grep -q "needs --device cuda" <<<"$err" || fail "bad error for --gpu-layers: $err"
if err=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 1 --host-sampling 2>&1); then fail "--host-sampling on cpu"; fi
grep -q "needs --device cuda" <<<"$err" || fail "bad error for --host-sampling: $err"
if err=$("$memtile" serve -m "$tmp/s.gguf" --port 0 --host-sampling 2>&1); then fail "serve --host-sampling on cpu"; fi
grep -q "needs --device cuda" <<<"$err" || fail "bad error for serve --host-sampling: $err"
if ! grep -q "^  cuda .*device present" <<<"$("$memtile" --version)"; then
  if err=$("$memtile" run -m "$tmp/s.gguf" --prompt-ids 1 -n 1 --device cuda --gpu-layers 2 2>&1); then
    fail "--device cuda ran without a GPU"
  fi
  grep -q "cuda" <<<"$err" || fail "bad error for --device cuda: $err"
fi
echo "run: ok"
