#!/usr/bin/env bash
# Refresh the CPU lock: exact versions and sha256 hashes of the whole dependency tree, resolved from
# the ranges in pyproject.toml by uv (https://docs.astral.sh/uv/), written as pip requirement files
# that scripts/setup.sh installs with `pip install --require-hashes`.
#   bash scripts/lock.sh             # rewrite constraints/cpu.lock and constraints/cpu-dev.lock
#   bash scripts/lock.sh --check     # exit 1 if the lock no longer matches pyproject.toml's ranges
# The lock targets CPython 3.11 on Linux x86_64 (the CPU set-up); torch is the CPU build pinned in
# constraints/cpu.txt, found in GUIAGENT_TORCH_WHEELS (default /opt/wheels) or the PyTorch CPU index.
# uv comes from PyPI into .cache/lock-tools the first time (nothing else on the machine changes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
UV=${UV:-}
if [ -z "$UV" ]; then
  if command -v uv >/dev/null 2>&1; then UV=uv
  else
    [ -x .cache/lock-tools/bin/uv ] || { "$PY" -m venv .cache/lock-tools && .cache/lock-tools/bin/pip install -q "uv>=0.9"; }
    UV=.cache/lock-tools/bin/uv
  fi
fi
wheels=${GUIAGENT_TORCH_WHEELS:-/opt/wheels}
if [ -d "$wheels" ]; then torch_src=(--find-links "$wheels")
else torch_src=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match); fi
common=(--python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header
        --quiet -c constraints/cpu.txt "${torch_src[@]}")
out=constraints
if [ "${1:-}" = "--check" ]; then
  # the current lock as uv's preferences: the check asks whether it still satisfies pyproject.toml,
  # not whether something newer came out since
  out=$(mktemp -d)
  for f in cpu cpu-dev; do grep -v '^# The CPU install' "constraints/$f.lock" > "$out/$f.lock.new"; done
fi
"$UV" pip compile pyproject.toml constraints/build.in "${common[@]}" -o "$out/cpu.lock.new"
"$UV" pip compile pyproject.toml constraints/build.in --extra dev "${common[@]}" -c "$out/cpu.lock.new" \
    -o "$out/cpu-dev.lock.new"
header="# The CPU install's lock (CPython 3.11, Linux x86_64). Do not edit: bash scripts/lock.sh rewrites it."
for f in cpu cpu-dev; do
  { echo "$header"; cat "$out/$f.lock.new"; } > "$out/$f.lock"; rm "$out/$f.lock.new"
done
if [ "${1:-}" = "--check" ]; then
  pins() { grep -vE '^[[:space:]]*#' "$1"; }   # requirements and hashes; uv's "via" notes aside
  if diff -q <(pins constraints/cpu.lock) <(pins "$out/cpu.lock") >/dev/null \
     && diff -q <(pins constraints/cpu-dev.lock) <(pins "$out/cpu-dev.lock") >/dev/null; then
    echo "lock: up to date"; exit 0
  fi
  echo "lock: constraints/*.lock no longer satisfy pyproject.toml (run bash scripts/lock.sh):" >&2
  diff <(pins constraints/cpu-dev.lock) <(pins "$out/cpu-dev.lock") >&2 || true
  exit 1
fi
echo "lock: $(grep -cE '^[A-Za-z0-9]' constraints/cpu.lock) packages in constraints/cpu.lock, $(grep -cE '^[A-Za-z0-9]' constraints/cpu-dev.lock) in constraints/cpu-dev.lock" >&2
