#!/usr/bin/env bash
# Install guiagent on a CPU machine (Debian-like, Python >= 3.11).
#   bash scripts/setup.sh          # the package
#   bash scripts/setup.sh --dev    # the package and the test dependencies
# Installs Debian's chromium (the browser suites' browser) when no Chromium is found, and
# chromium-headless-shell (lighter, for headless envs) when it can.
# Never installs torchvision (its only wheel here is CUDA-linked and breaks transformers).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extra=""
[ "${1:-}" = "--dev" ] && extra="[dev]"

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "guiagent needs Python >= 3.11; $PY is $("$PY" --version 2>&1)" >&2; exit 1
fi

have_chromium() {
  [ -n "${GUIAGENT_CHROMIUM:-}" ] && [ -x "${GUIAGENT_CHROMIUM}" ] && return 0
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1
}
if ! have_chromium; then
  echo "setup: no Chromium found; installing Debian's chromium package" >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: cannot install Chromium here; install it yourself (apt-get install chromium) or set GUIAGENT_CHROMIUM=/path/to/chrome" >&2
    exit 1
  fi
fi

# Chromium's headless shell: the same rendering; python bench/env_cpu.py measured 18% less CPU a
# tap + settle + observe and 27% less a page load. Headless envs launch it when it is installed
# (optional: the full browser works too).
if [ -z "${GUIAGENT_CHROMIUM:-}" ] && ! command -v chromium-headless-shell >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 \
    || echo "setup: no chromium-headless-shell package here; the envs use the full Chromium" >&2
fi

# The whole dependency tree from the lock (exact versions, sha256 hashes; bash scripts/lock.sh
# refreshes it), then the package itself, built without isolation from the locked setuptools.
# GUIAGENT_UNLOCKED=1 installs the newest versions pyproject.toml's ranges allow instead
# (scripts/drift_check.sh uses it); so does a Python or platform the lock was not made for.
lock=constraints/cpu.lock
[ -n "$extra" ] && lock=constraints/cpu-dev.lock
# torch's CPU build is not on PyPI: taken from a find-links folder when this machine has one
# (GUIAGENT_TORCH_WHEELS, default /opt/wheels), else from the PyTorch CPU index.
torch_src=()
if ! ls "${GUIAGENT_TORCH_WHEELS:-/opt/wheels}"/torch-2.13.0+cpu-* >/dev/null 2>&1; then
  torch_src=(--extra-index-url https://download.pytorch.org/whl/cpu)
else
  torch_src=(--find-links "${GUIAGENT_TORCH_WHEELS:-/opt/wheels}")
fi
fits=$("$PY" -c 'import platform, sys; print(int(sys.version_info[:2] == (3, 11) and platform.system() == "Linux" and platform.machine() == "x86_64"))')
if [ "${GUIAGENT_UNLOCKED:-0}" != 1 ] && [ "$fits" = 1 ]; then
  "$PY" -m pip install -q "${torch_src[@]}" --require-hashes --no-deps -r "$lock"
  "$PY" -m pip install -q --no-deps --no-build-isolation -e ".${extra}"
else
  [ "${GUIAGENT_UNLOCKED:-0}" = 1 ] \
    || echo "setup: the lock is made for CPython 3.11 on Linux x86_64; installing the newest versions pyproject.toml allows" >&2
  # the CPU wheel of torch first, then the package with torch held at that version
  "$PY" -m pip install -q "${torch_src[@]}" -c constraints/cpu.txt "torch==2.13.0"
  "$PY" -m pip install -q -U --upgrade-strategy eager -c constraints/cpu.txt -e ".${extra}"
fi
# --dev: the Android transport tests' tools: the adb client (Debian) and Appium 3 + its fake
# driver (npm, project-local).
if [ "${1:-}" = "--dev" ]; then
  if ! command -v adb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing Debian's adb client (Android transport tests)" >&2
      (apt-get install -y -qq adb >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq adb >/dev/null; }) \
        || echo "setup: could not install adb; its tests will skip (apt-get install adb)" >&2
    elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
      sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq adb >/dev/null 2>&1 \
        || echo "setup: could not install adb; its tests will skip (apt-get install adb)" >&2
    else
      echo "setup: no adb client and no apt-get; the adb tests will skip (install Android's platform-tools)" >&2
    fi
  fi
  bash scripts/setup_appium.sh
fi
if "$PY" -m pip show torchvision >/dev/null 2>&1; then
  echo "setup: warning: torchvision is installed; on a CPU-only machine its CUDA-linked wheel breaks transformers' processors (pip uninstall torchvision)" >&2
fi
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
echo "setup: done ($("$PY" -c 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}")'))" >&2
