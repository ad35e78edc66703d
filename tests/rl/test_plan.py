"""The start resolved once (rl.plan.resolve_run) and the run's phase schedule (rl.plan.Schedule)."""

from __future__ import annotations

import pytest

from guiagent.config import ConfigError
from rl.checkpoint import save_config
from rl.config import SemiOnlineSettings, TrainConfig
from rl.plan import Schedule, resolve_run


def test_each_mode_schedules_its_phases():
    online, replayed = object(), object()
    staged = TrainConfig.build(mode="staged", data=("d",), iterations=5, epochs=2, semi=SemiOnlineSettings(
        iterations=2, epochs=3))
    phases = [Schedule(staged, online, replayed).at(i) for i in range(5)]
    assert [p.replays for p in phases] == [True, True, False, False, False]
    assert [p.strategy is replayed for p in phases] == [True, True, False, False, False]
    assert [p.epochs for p in phases] == [3, 3, 2, 2, 2]  # --semi.epochs for the replayed ones
    assert [p.counts_env_steps for p in phases] == [False, False, True, True, True]
    assert [p.stage_end for p in phases] == [False, True, False, False, False]  # the KL anchor moves after it
    mixed = TrainConfig.build(mode="mixed", data=("d",), iterations=6, semi=SemiOnlineSettings(per_online=2))
    assert [Schedule(mixed, online, replayed).at(i).replays for i in range(6)] == [True, True, False] * 2
    assert not any(Schedule(mixed, online, replayed).at(i).stage_end for i in range(6))
    plain = TrainConfig.build(model="m")
    assert all(Schedule(plain, online).at(i).strategy is online for i in range(3))
    with pytest.raises(ValueError, match="needs the semi-online credit"):
        Schedule(staged, online)


def test_a_new_run_is_resolved_without_creating_anything(tmp_path):
    out = tmp_path / "run"
    plan = resolve_run(TrainConfig.build(model="m", tasks=("open_app", "go_home"), out=str(out)))
    assert plan.tasks == ["open_app", "go_home"] and plan.demo_tasks == plan.tasks and plan.unseen_tasks == []
    assert plan.checkpoint is None and plan.new_total is None and not out.exists()
    (out / "sub").mkdir(parents=True)  # a folder holding something else is refused in one line
    with pytest.raises(ConfigError, match="--out"):
        resolve_run(TrainConfig.build(model="m", out=str(out)))
    with pytest.raises(KeyError, match="unknown task"):
        resolve_run(TrainConfig.build(model="m", tasks=("no_such_task",), out=str(tmp_path / "other")))


def test_a_resume_is_resolved_from_the_runs_own_config_and_a_torn_checkpoint_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save_config(run, TrainConfig.build(model="m", tasks=("go_home",), iterations=4, seed=3, out=str(run)))
    plan = resolve_run(TrainConfig.build(resume=str(run), seed=9), iterations_given=False)
    assert (plan.cfg.seed, plan.cfg.iterations, plan.cfg.resume, plan.tasks) == (3, 4, str(run), ["go_home"])
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "trainer_state.json").write_text("{torn")
    with pytest.raises(ConfigError) as e:
        resolve_run(TrainConfig.build(resume=str(run)))
    assert str(e.value).startswith(f"--resume {run}: ") and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no such run directory"):
        resolve_run(TrainConfig.build(resume=str(tmp_path / "none")))
