#!/usr/bin/env bash
# Renders shared expected.json cases with `memtile template` and compares byte for byte; also checks that a
# template error exits non-zero with the message. Usage: template.sh MEMTILE_BINARY SHARED_DIR
set -euo pipefail
memtile=$1
shared=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Extract one rendering case (with tools) and one error case from expected.json.
python3 - "$shared/templates/expected.json" "$work" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
out = sys.argv[2]
ok = next(c for c in cases if c["template"] == "Qwen-Qwen2.5-7B-Instruct.jinja" and c["conversation"] == "tools"
          and "expected" in c)
json.dump(ok["messages"], open(f"{out}/messages.json", "w"), ensure_ascii=False)
json.dump(ok["tools"], open(f"{out}/tools.json", "w"), ensure_ascii=False)
open(f"{out}/expected.txt", "w", encoding="utf-8", newline="").write(ok["expected"])
open(f"{out}/agp", "w").write("1" if ok["add_generation_prompt"] else "0")
open(f"{out}/bos", "w").write(ok["bos_token"])
open(f"{out}/eos", "w").write(ok["eos_token"])
PY

args=(template --template "$shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja" --messages "$work/messages.json"
      --tools "$work/tools.json" --bos-token "$(cat "$work/bos")" --eos-token "$(cat "$work/eos")")
if [ "$(cat "$work/agp")" = 1 ]; then args+=(--add-generation-prompt); fi
"$memtile" "${args[@]}" > "$work/got.txt"
if ! cmp -s "$work/got.txt" "$work/expected.txt"; then
    echo "FAIL: rendering differs from expected.json" >&2
    diff <(cat "$work/expected.txt") <(cat "$work/got.txt") >&2 || true
    exit 1
fi

# raise_exception surfaces as a non-zero exit with the template's message.
printf '%s' "{{ raise_exception('no such role') }}" > "$work/bad.jinja"
if "$memtile" template --template "$work/bad.jinja" --messages "$work/messages.json" 2> "$work/err.txt"; then
    echo "FAIL: template error did not exit non-zero" >&2
    exit 1
fi
grep -q "no such role" "$work/err.txt" || { echo "FAIL: error message missing" >&2; cat "$work/err.txt" >&2; exit 1; }
echo "ok"
