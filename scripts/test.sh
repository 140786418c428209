#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit, CLI and a 60 s fuzz run of the
# GGUF reader). Exits non-zero on any failure. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
if [ -z "${MEMTILE_SKIP_FORMAT_CHECK:-}" ]; then bash scripts/check-format.sh; fi
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
if [ -z "${MEMTILE_SKIP_FUZZ:-}" ]; then bash scripts/fuzz.sh "${MEMTILE_FUZZ_SECONDS:-60}"; fi
