#!/usr/bin/env bash
# One check of the real-model training path on a bare GPU machine (details: scripts/gpu_check.py).
#   bash scripts/gpu_check.sh --prepare          # here (network, Chromium): demos + missing wheels -> .gpu_check/
#   bash scripts/gpu_check.sh [run options]      # on the GPU machine, .gpu_check/ carried: offline install, then
#                                                # semi-online RL on a random Qwen2.5-VL-3B, full FT and LoRA (<= 8 min)
#   bash scripts/gpu_check.sh --cpu [--demos DIR] [--model DIR] [run options]   # the same path on CPU, tiny model
# The last stdout line of a run is one JSON object. Exit status: 0 all variants ran, 1 one failed (its error is in
# the JSON), 2 bad input (no GPU, no demonstrations).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # paths in the options stay relative to where it was called from
PY=${PYTHON:-python3}
mode=gpu
case "${1:-}" in
  --prepare) shift; exec "$PY" "$ROOT/scripts/gpu_check.py" prepare "$@" ;;
  --cpu) shift; mode=cpu ;;
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
esac
if [ "$mode" = cpu ]; then
  demos=""
  for a in "$@"; do case "$a" in --demos|--demos=*) demos=given ;; esac; done
  if [ -z "$demos" ] && [ ! -f "$ROOT/.gpu_check/demos/store.sqlite" ]; then
    # nothing prepared: record a few demonstrations (real Chromium) into a temporary folder
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -m guiagent eval --env webapps --agent oracle --episodes 6 --seed 0 --out "$tmp/demos" >&2
    set -- --demos "$tmp/demos" "$@"
  fi
  rc=0
  "$PY" "$ROOT/scripts/gpu_check.py" run --device cpu "$@" || rc=$?
  exit $rc
fi
# the GPU machine: nothing is installed but the image; the package runs from this tree
"$PY" "$ROOT/scripts/gpu_check.py" install
export PYTHONPATH="$ROOT/.gpu_check/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# a safety net over the run's own budget (--budget-s, default 390 s): at most 8 minutes in all
exec timeout 470 "$PY" "$ROOT/scripts/gpu_check.py" run --device cuda "$@"
