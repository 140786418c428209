#!/usr/bin/env bash
# Issue 4's CPU workload: synthetic TinyLlama-1.1B and Llama-3.2-1B models at Q4_K_M, Q5_K_S, Q6_K, Q8_0 and
# F16 (generated once into MODELS_DIR), each benchmarked by bench-decode-roofline at 1 and 2 threads:
# pp64, pp512, decode tok/s and the roofline ratio against the best read variant (observe/read-variants.h) measured
# in the same run, interleaved with the decode repetitions (the plain read of earlier tables is its own column).
# usage: bench/cpu-workload.sh BUILD_DIR MODELS_DIR [extra bench-decode-roofline flags, e.g. --repack on]
# Option --phase-rounds N (e.g. 12; with --phase-tg T, default 16): after the table, bench-decode-roofline's
# phase-matched table, each decode burst divided by the reads measured right before and after it with the same
# threads (the ratio the VM's two read phases do not distort; adds about 10-30 s per row).
# Then bench/peak-memory.sh: whole-process peak RSS / (file + KV) per model (issue 4's memory target).
# Run it on an otherwise idle machine; it takes about 15-25 minutes on 2 cores once the models exist.
set -euo pipefail
build=$1 models=$2; shift 2
mkdir -p "$models"
for arch in tinyllama-1.1b llama3.2-1b; do
  for type in q4_k_m q5_k_s q6_k q8_0 f16; do
    f="$models/$arch-$type.gguf"
    [ -s "$f" ] || "$build/memtile" gen --arch "$arch" --type "$type" -o "$f" >/dev/null
  done
done
files=()
for arch in tinyllama-1.1b llama3.2-1b; do
  for type in q8_0 f16 q4_k_m q6_k q5_k_s; do files+=("$models/$arch-$type.gguf"); done
done
"$build/bench/bench-decode-roofline" --threads 1,2 --tg 32 --reps 2 --repack off,on "$@" "${files[@]}"
# Whole-process peak memory against the issue's target (file + KV cache + 5 %).
"$(dirname "$0")/peak-memory.sh" "$models" "$build/memtile"
