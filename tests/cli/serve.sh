#!/usr/bin/env bash
# End-to-end test of `memtile serve`: builds a small random-weight model with a tool-capable chat template
# (Qwen 2.5's), starts the server on a free loopback port and drives it with the official openai and ollama
# Node clients (installed from npm into a cache folder), then checks that SIGTERM exits 0.
# usage: serve.sh MEMTILE_BINARY SHARED_DIR
set -euo pipefail
BIN=$(realpath "$1"); SHARED=$(realpath "$2")
HERE=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "SKIP: node/npm not available, the serve end-to-end test needs them"; exit 0
fi
TMP=$(mktemp -d); trap 'kill $PID 2>/dev/null || true; rm -rf "$TMP"' EXIT
PID=

CACHE=${MEMTILE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memtile-e2e}
mkdir -p "$CACHE"
cp "$HERE/e2e/package.json" "$HERE/e2e/serve-e2e.mjs" "$CACHE/"
if ! (cd "$CACHE" && npm install --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
    cat "$TMP/npm.log"; echo "FAIL: npm install of openai and ollama failed"; exit 1
fi

"$BIN" gen --arch tiny --type q8_0 --vocab "$SHARED/vocab/ggml-vocab-llama-spm.gguf" -o "$TMP/tiny.gguf" >/dev/null
if out=$("$BIN" serve -m "$TMP/tiny.gguf" --port 0 --cpu-mask 0,0 2>&1); then echo "FAIL: --cpu-mask 0,0 accepted"; exit 1; fi
grep -q "CPU 0 repeated" <<<"$out" || { echo "FAIL: --cpu-mask error: $out"; exit 1; }
# Pinned to every CPU this test may use (one compute thread each).
MASK=$(taskset -pc $$ | sed 's/.*: //')
"$BIN" serve -m "$TMP/tiny.gguf" --alias tiny --port 0 --cpu-mask "$MASK" --ctx 16384 --kv-type f32 --slots 8 --max-queue 2 --http-threads 64 \
    --api-key secret --max-body 1 --chat-template-file "$SHARED/templates/Qwen-Qwen2.5-7B-Instruct.jinja" \
    >"$TMP/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
    PORT=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/serve.log")
    [ -n "$PORT" ] && break
    kill -0 $PID 2>/dev/null || { cat "$TMP/serve.log"; echo "FAIL: server exited"; exit 1; }
    sleep 0.1
done
[ -n "$PORT" ] || { cat "$TMP/serve.log"; echo "FAIL: server did not start"; exit 1; }

rc=0
node "$CACHE/serve-e2e.mjs" "http://127.0.0.1:$PORT" tiny secret "$SHARED/clients/openclaw" || rc=$?

kill -TERM $PID
src=0; wait $PID || src=$?
PID=
if [ $src -ne 0 ]; then echo "FAIL: serve exited with $src after SIGTERM"; rc=1; else echo "ok   SIGTERM: exit 0"; fi
if [ $rc -ne 0 ]; then echo "--- server log (tail)"; tail -40 "$TMP/serve.log"; fi
exit $rc
