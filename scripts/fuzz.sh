#!/usr/bin/env bash
# Builds the libFuzzer target of the GGUF reader with clang + ASan/UBSan and runs it for $1 seconds
# (default 60) on a seed corpus made from the GGUF files in ../shared. Fails on any crash, leak or report.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMTILE_FUZZ=ON -DMEMTILE_CUDA=OFF \
  -DMEMTILE_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz-gguf-reader -j"$(nproc)"
corpus=build-fuzz/corpus
rm -rf "$corpus" && mkdir -p "$corpus"
# Seeds: the first 64 KiB of every shared GGUF (whole headers of the small files, truncated metadata of the
# large vocabularies), so mutations start from real layouts.
for f in ../shared/quant/*.gguf ../shared/vocab/*.gguf; do
  head -c 65536 "$f" > "$corpus/$(basename "$f")"
done
shopt -s nullglob
for f in tests/fuzz/seeds/*; do cp "$f" "$corpus/"; done
echo "[fuzz] running fuzz-gguf-reader for ${seconds}s on $(ls "$corpus" | wc -l) seeds"
./build-fuzz/tests/fuzz/fuzz-gguf-reader "$corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/ 2>&1 | tail -n 15
echo "[fuzz] no crash, leak or sanitizer report"
