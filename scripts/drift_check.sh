#!/usr/bin/env bash
# Drift check: install the NEWEST versions pyproject.toml's ranges allow (not the lock) into a new
# virtual environment, list what moved against constraints/cpu-dev.lock, and run the test suite there,
# so a dependency release that breaks the project shows up here before a user meets it.
#   bash scripts/drift_check.sh                 # the default suite (about as long as the normal one)
#   bash scripts/drift_check.sh tests/webui     # pytest arguments narrow the run
#   GUIAGENT_DRIFT=1 bash .ci/run               # the same from CI (off by default)
# Exit status: pytest's. The last line is one JSON object: {"moved": [...], "pytest_exit": N}.
# When it passes with moved versions, `bash scripts/lock.sh` takes them into the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
venv=${DRIFT_VENV:-$(mktemp -d)/venv}
"$PY" -m venv "$venv"
PYTHON="$venv/bin/python" GUIAGENT_UNLOCKED=1 bash scripts/setup.sh --dev
moved=$("$venv/bin/python" - constraints/cpu-dev.lock <<'PY'
import json, re, sys
from importlib import metadata

norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
locked = {}
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
    if m:
        locked[norm(m.group(1))] = m.group(2)
moved = []
for dist in metadata.distributions():
    name = norm(dist.metadata["Name"])
    if name in locked and locked[name] != dist.version:
        moved.append(f"{name} {locked[name]} -> {dist.version}")
print(json.dumps(sorted(moved)))
PY
)
echo "drift: versions that moved against the lock: $moved" >&2
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
echo "{\"moved\": $moved, \"pytest_exit\": $rc, \"venv\": \"$venv\"}"
exit $rc
