#!/usr/bin/env bash
# Fails when a C++ source differs from what clang-format (project .clang-format) would produce.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' 2>/dev/null || true)
[ -z "$files" ] && exit 0
bad=0
for f in $files; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then echo "[format] $f is not clang-formatted (run: clang-format -i $f)"; bad=1; fi
done
[ $bad -eq 0 ] && echo "[format] all $(echo "$files" | wc -w) files clang-formatted"
exit $bad
