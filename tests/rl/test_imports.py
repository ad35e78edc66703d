"""The library does not import the CLI: ``rl`` (trainer, evaluation, semi-online) loads without it."""

import subprocess
import sys


def _runs_clean(code: str) -> None:
    """``code`` in a fresh interpreter (what a module loads shows only there) exits 0; its output otherwise."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]


def test_rl_imports_without_the_cli():
    code = ("import sys, rl.trainer, rl.evaluate, rl.replay, rl.sop, rl.strategies, rl.produce, rl.update, rl.checkpoint; "
            "bad = sorted(m for m in sys.modules if m.startswith('guiagent.cli')); print(bad); assert not bad")
    _runs_clean(code)


def test_a_config_and_the_replay_path_need_no_browser_or_pool():
    """What the GPU check runs (a TrainConfig, semi-online replay, the update) loads neither the env
    pool nor the browser's support (greenlet, Playwright, Ray): a bare GPU image has none of them."""
    code = ("import sys; from rl.config import TrainConfig; TrainConfig.build(group_size=2); "
            "import rl.replay, rl.strategies, rl.update, rl.optim, rl.agents; "
            "bad = sorted(m for m in ('greenlet', 'playwright', 'ray', 'emulators.pool') if m in sys.modules); "
            "print(bad); assert not bad")
    _runs_clean(code)


def test_the_config_and_the_cli_help_load_no_torch():
    """A config (its algorithm's checks and settings included) is validated from the algorithms'
    declarations (rl.algorithms), torch-free: `guiagent train --help` and a config error answer without
    loading torch; the implementations are imported when a run builds its strategy."""
    code = ("import sys; from rl.config import TrainConfig; "
            "[TrainConfig.build(algo=a, model='m') for a in ('grpo', 'dr_grpo', 'gigpo', 'ppo', 'awr')]; "
            "TrainConfig.embedded(); import guiagent.cli.train; "
            "bad = sorted(m for m in ('torch', 'transformers', 'rl.strategies') if m in sys.modules); "
            "print(bad); assert not bad")
    _runs_clean(code)


def test_every_declared_algorithm_has_an_implementation_that_subclasses_it():
    import pytest

    from rl.algorithms import ALGORITHMS, algorithm, choices, declare
    from rl.strategies import Strategy, strategy_class

    assert choices() == ["grpo", "dr_grpo", "gigpo", "ppo", "awr"]  # --algo's; semi-online is the schedule's
    assert list(ALGORITHMS) == [*choices(), "semi-online"]
    with pytest.raises(ValueError, match="--algo 'semi-online': choose one of grpo, dr_grpo"):
        algorithm("semi-online")
    for name, declared in ALGORITHMS.items():
        impl = strategy_class(name)
        assert issubclass(impl, declared) and issubclass(impl, Strategy) and impl.name == name
        # the flags the trainer reads come from the declaration
        assert (impl.ratio, impl.online_only, impl.branches) == (declared.ratio, declared.online_only,
                                                                  declared.branches)
    # a section's fields are the settings an algorithm owns: another algorithm refuses them when given
    assert set(ALGORITHMS["gigpo"].own_settings()) == {"step_weight", "gigpo_norm", "anchor_match",
                                                        "anchor_tolerance"}
    assert "awr_beta" in ALGORITHMS["ppo"].unused(_cfg("ppo"))
    with pytest.raises(ValueError, match="declared already"):
        declare("grpo", "rl.strategies.group:GRPO")(type("Again", (ALGORITHMS["grpo"],), {}))
    with pytest.raises(ValueError, match="no settings section"):
        declare("new_algo", "m:C")(type("New", (ALGORITHMS["grpo"],), {"sections": ("nope",)}))
    assert "new_algo" not in ALGORITHMS


def _cfg(algo):
    from rl.config import TrainConfig
    return TrainConfig.build(algo=algo, model="m")
