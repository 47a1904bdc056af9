#!/usr/bin/env bash
# Issue 7 experiments: bounded windows vs unbounded KV, and AIMD admission, with `liveserve bench duplex`.
# Every run starts a fresh server; results go to benchmarks/results/duplex/, plots next to them.
# Usage: benchmarks/duplex_window.sh [window|plateau|sweep|ramp|turnover]...   (default: all five)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/duplex
BENCH=".venv/bin/liveserve bench duplex"
SHORT="--frame-ms 160"          # window runs: 160 ms frames
LONG="--frame-ms 480 --chunk-ms 160"  # capacity runs: larger frames batch more sessions per tick
POOL="--kv-blocks 120"          # 4 unbounded sessions at 160 ms frames fill it in about 25 s
WINDOW="--window 96 --sinks 4"  # about 8 blocks per session
mkdir -p "$OUT"

run() {  # run NAME ARGS...: one bench run, its JSON and plots under $OUT
  local name=$1; shift
  echo "== $name: $*"
  $BENCH "$@" --result-json "$OUT/$name.json" --plot-dir "$OUT/plots/$name" | tail -n 12
}

window() {  # 5 unbounded and 5 windowed runs at the same load
  for i in 1 2 3 4 5; do
    run "unbounded_n4_$i" $SHORT --sessions 4 --duration-s 40 $POOL
    run "window_n4_$i" $SHORT --sessions 4 --duration-s 40 $POOL $WINDOW
  done
}

plateau() {  # windowed occupancy against N
  for n in 2 6 8; do run "window_n${n}" $SHORT --sessions "$n" --duration-s 30 $POOL $WINDOW; done
}

sweep() {  # fixed N, windowed: the largest N with p99 under half the frame budget and no stall
  for n in ${SWEEP_N:-8 12 16 20 24 26 28 32 36 40 48}; do run "sweep_n${n}" $LONG --sessions "$n" --duration-s 30 $WINDOW; done
  for n in ${REPEAT_N:-32 36 40 44}; do run "sweep_n${n}_2" $LONG --sessions "$n" --duration-s 30 $WINDOW; done
}

ramp() {  # sessions offered open-loop at 0.4/s under AIMD for 240 s, with and without windows (400 blocks)
  run ramp_window $LONG --ramp 0.4 --duration-s 240 --admission aimd $WINDOW --kv-blocks 400
  run ramp_unbounded $LONG --ramp 0.4 --duration-s 240 --admission aimd --kv-blocks 400
}

turnover() {  # sessions offered at 0.8/s that hang up after 60 s: admission settling as they turn over
  local ramp="$LONG --ramp 0.8 --session-s 60 --duration-s 240 --admission aimd $WINDOW --kv-blocks 400"
  run ramp_turnover_window $ramp
  run ramp_turnover_window_f09 $ramp --config benchmarks/configs/duplex_aimd_f09.yaml
  run ramp_turnover_window_f09_t045 $ramp --config benchmarks/configs/duplex_aimd_f09_t045.yaml
}

for part in "${@:-window plateau sweep ramp turnover}"; do
  for p in $part; do "$p"; done
done
.venv/bin/python benchmarks/duplex_summary.py "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
