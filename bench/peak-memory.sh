#!/usr/bin/env bash
# Issue 4's memory target, "resident memory <= file size + KV cache + 5 %": the whole process's peak resident
# set (VmHWM) of `memtile run` (defaults, so --repack auto; 16 tokens from an empty prompt, greedy) divided by
# the file size plus the KV cache at CTX positions, per model of the issue-4 workload and thread count.
# usage: bench/peak-memory.sh MODELS_DIR BIN [BIN ...]
#   MODELS_DIR: the files bench/cpu-workload.sh generates ({tinyllama-1.1b,llama3.2-1b}-TYPE.gguf).
#   BIN: memtile binaries to compare (A/B); they alternate per model, so the machine's state hits them alike.
#   The first must print "[memtile] peak RSS ..." under --verbose (this branch and later); for one that does
#   not (an older build), the peak comes from GNU time (/usr/bin/time) and the denominator from the first's row.
# env: THREADS (default "1 2"), CTX (default 256), N (default 16).
set -euo pipefail
models=$1
shift
bins=("$@")
[ ${#bins[@]} -gt 0 ] || { echo "usage: $0 MODELS_DIR BIN [BIN ...]" >&2; exit 2; }
threads=${THREADS:-"1 2"} ctx=${CTX:-256} n=${N:-16}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

header="| model | threads |"
rule="|---|---|"
for b in "${bins[@]}"; do
  header+=" $b: peak MiB (ratio) |"
  rule+="---|"
done
echo "peak RSS / (file + KV at ctx $ctx), memtile run -n $n --temp 0 --ids -p \"\" -v"
echo "$header"
echo "$rule"
for arch in tinyllama-1.1b llama3.2-1b; do
  for type in q8_0 f16 q4_k_m q6_k q5_k_s; do
    f="$models/$arch-$type.gguf"
    [ -s "$f" ] || { echo "| $arch-$type | missing |"; continue; }
    for t in $threads; do
      row="| $arch-$type | $t |"
      denom=""
      for b in "${bins[@]}"; do
        cmd=("$b" run -m "$f" --ids -n "$n" -c "$ctx" --temp 0 -p "" -t "$t" -v)
        if [ -x /usr/bin/time ]; then
          /usr/bin/time -f "gnu-time-peak-kib %M" "${cmd[@]}" >/dev/null 2>"$tmp"
        else
          "${cmd[@]}" >/dev/null 2>"$tmp"
        fi
        line=$(grep -m1 '^\[memtile\] peak RSS' "$tmp" || true)
        if [ -n "$line" ]; then
          # "[memtile] peak RSS 807.0 MiB = 1.043 x (file 765.6 MiB + KV 8.0 MiB)"
          peak=$(awk '{print $4}' <<<"$line")
          denom=$(awk '{gsub(/[()]/, ""); print $10 + $14}' <<<"$line")
        else
          kib=$(awk '/^gnu-time-peak-kib/ {print $2}' "$tmp")
          if [ -z "$kib" ] || [ -z "$denom" ]; then
            row+=" n/a |"
            continue
          fi
          peak=$(awk -v k="$kib" 'BEGIN {printf "%.1f", k / 1024}')
        fi
        row+=$(awk -v p="$peak" -v d="$denom" 'BEGIN {printf " %.1f (%.3f) |", p, p / d}')
      done
      echo "$row"
    done
  done
done
