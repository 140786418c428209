#!/usr/bin/env bash
# Installs what is missing, builds memtile in Release and runs the main job on the built-in default:
# the project's default model when it exists, otherwise a small synthetic model generated here (greedy
# generation, printing tokens/s).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
if ./build/memtile run -n 0 --ids >/dev/null 2>&1; then
  ./build/memtile run -p "${1:-In the beginning}" -n 96 --temp 0 --verbose
else
  model=build/demo-stories15m-q8_0.gguf
  [ -f "$model" ] || ./build/memtile gen --arch stories15m --type q8_0 --seed 1 -o "$model"
  echo "[demo] no trained default model yet: greedy generation on a synthetic stories15M-shaped model"
  ./build/memtile inspect "$model"
  ./build/memtile run -m "$model" -p "" -n 128 --temp 0 --ids --verbose | tr '\n' ' '
  echo
fi
