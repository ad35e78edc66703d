"""The library does not import the CLI: ``rl`` (trainer, evaluation, semi-online) loads without it."""

import subprocess
import sys


def test_rl_imports_without_the_cli():
    code = ("import sys, rl.trainer, rl.evaluate, rl.replay, rl.sop, rl.strategies, rl.produce, rl.update, rl.checkpoint; "
            "bad = sorted(m for m in sys.modules if m.startswith('guiagent.cli')); print(bad); assert not bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
