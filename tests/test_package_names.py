"""guiagent's other top-level packages (rl, judge, ...) clashing with someone else's: one clear ImportError.

Each case plants a foreign package or module earlier on ``sys.path`` in a fresh
interpreter and imports guiagent (and runs the CLI) there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from guiagent._packages import PACKAGES, clash

REPO = Path(__file__).resolve().parent.parent


def _python(args: list[str], fake_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake_dir), str(REPO)])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
                          check=False)


@pytest.mark.parametrize("name, files", [
    ("judge", {"judge/__init__.py": "VERSION = '3.1'  # some other project's judge\n"}),
    ("rl", {"rl.py": "def agent(): pass\n"}),
    ("grounding", {"grounding/__init__.py": "# mentions __guiagent__ = True only inside a comment\n"}),
])
def test_a_foreign_package_fails_loudly(tmp_path, name, files):
    fake = tmp_path / "site"
    for rel, text in files.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    planted = str(fake / next(iter(files)))
    out = _python(["-c", "import guiagent"], fake, tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: guiagent: the top-level package")
    assert repr(name) in last and planted in last and str(REPO / name) in last, last
    # the command line says the same, on its last line
    cli = _python(["-m", "guiagent", "--help"], fake, tmp_path)
    assert cli.returncode != 0 and cli.stderr.strip().splitlines()[-1] == last


def test_our_own_packages_pass(tmp_path):
    out = _python(["-c", "import guiagent, judge, rl; print(judge.__guiagent__, rl.__guiagent__)"], tmp_path, tmp_path)
    assert out.returncode == 0 and out.stdout.split() == ["True", "True"], out.stderr
    assert all(clash(name) is None for name in PACKAGES)
