#!/usr/bin/env bash
# Renders an SVG to PNG with headless Chromium (installs Debian's chromium when missing).
# Usage: scripts/screenshot-svg.sh IN.svg OUT.png [WIDTH HEIGHT]
set -euo pipefail
in=$1; out=$2
# Size of the picture: the SVG's own width/height unless given.
w=${3:-$(grep -o 'width="[0-9]*"' "$in" | head -1 | grep -o '[0-9]*')}
h=${4:-$(grep -o 'height="[0-9]*"' "$in" | head -1 | grep -o '[0-9]*')}
if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
profile=$(mktemp -d); trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
  --disable-sync --disable-quic --no-first-run --user-data-dir="$profile" --hide-scrollbars \
  --window-size="$w,$h" --screenshot="$(realpath -m "$out")" "file://$(realpath "$in")" >/dev/null 2>&1
[ -s "$out" ] || { echo "screenshot failed: $out not written" >&2; exit 1; }
echo "wrote $out (${w}x${h})"
