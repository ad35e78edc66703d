"""Bench scripts run as ``python bench/NAME.py`` from a checkout: Python then puts ``bench/`` first
on the path, where ``bench/webui.py`` would shadow the project's ``webui`` package (guiagent refuses
to import beside a foreign ``webui``). Every script that imports the project puts the checkout first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = re.compile(r"^\s*(from|import) (guiagent|rl|emulators|grounding|judge|webui|bench)\b", re.M)
TOP_LEVEL = re.compile(r"^(from|import) (guiagent|rl|emulators|grounding|judge|webui|bench)\b", re.M)
SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if PROJECT.search(p.read_text()))


def test_bench_webui_would_shadow_the_package_from_bench_first_on_the_path():
    """The hazard the rule guards against is real: with bench/ first, importing guiagent fails."""
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import guiagent.policy"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the checkout on the path, behind bench/ (as on a GPU machine)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "bench", env=env)
    assert proc.returncode != 0 and "bench/webui.py" in proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_puts_the_checkout_first(script):
    text = script.read_text()
    insert = re.search(r"sys\.path\.insert\(0, ", text)
    assert insert, f"{script.name} imports the project but never puts the checkout first on sys.path"
    top = TOP_LEVEL.search(text)
    assert top is None or insert.start() < top.start(), \
        f"{script.name}: a project import at module level comes before the sys.path line"
