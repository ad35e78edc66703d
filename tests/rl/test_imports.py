"""The library does not import the CLI: ``rl`` (trainer, evaluation, semi-online) loads without it."""

import subprocess
import sys


def test_rl_imports_without_the_cli():
    code = ("import sys, rl.trainer, rl.evaluate, rl.replay, rl.sop, rl.strategies, rl.produce, rl.update, rl.checkpoint; "
            "bad = sorted(m for m in sys.modules if m.startswith('guiagent.cli')); print(bad); assert not bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]


def test_a_config_and_the_replay_path_need_no_browser_or_pool():
    """What the GPU check runs (a TrainConfig, semi-online replay, the update) loads neither the env
    pool nor the browser's support (greenlet, Playwright, Ray): a bare GPU image has none of them."""
    code = ("import sys; from rl.config import TrainConfig; TrainConfig.build(group_size=2); "
            "import rl.replay, rl.strategies, rl.update, rl.optim, rl.agents; "
            "bad = sorted(m for m in ('greenlet', 'playwright', 'ray', 'emulators.pool') if m in sys.modules); "
            "print(bad); assert not bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
