"""Async rollouts: bounded policy lag, pausing the producer, a clean stop; the trainer in async mode."""

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import contextlib

import pytest

from guiagent.store import StoreReader
from guiagent.types import Click, Observation, Step, TaskSpec, Trajectory
from rl.rollout import AsyncRollout, RolloutResult
from rl.config import TrainConfig
from rl.trainer import train


def _result(iteration: int, version: int) -> RolloutResult:
    obs = Observation(b"x", 2, 2)
    step = Step(0, obs, Click(0.5, 0.5), policy_version=version)
    traj = Trajectory(f"e{iteration}", TaskSpec("webapps", "t", iteration, "g"), (step,), group_id="g")
    return RolloutResult(trajectories=[traj])


class _Producer:
    """Produces one result per iteration, stamped with the version the learner last published."""

    def __init__(self, seconds: float = 0.0):
        self.version = 0
        self.seconds = seconds
        self.active = threading.Event()
        self.calls: list[int] = []

    def __call__(self, iteration: int) -> RolloutResult:
        self.active.set()
        self.calls.append(iteration)
        time.sleep(self.seconds)
        self.active.clear()
        return _result(iteration, self.version)


def test_results_older_than_max_lag_are_dropped():
    prod = _Producer()
    ar = AsyncRollout(prod, max_lag=1, start_iteration=5)
    try:
        first = ar.get(timeout=10)
        assert first.trajectories[0].task.seed == 5
        # the queue already holds results made at version 0; the learner moves to version 2
        time.sleep(0.2)
        prod.version = 2
        ar.set_version(2)
        nxt = ar.get(timeout=10)
        assert nxt.trajectories[0].steps[0].policy_version == 2
        assert ar.dropped >= 1
    finally:
        ar.close()
    # iterations are consecutive from the start cursor, whatever was dropped
    assert prod.calls == list(range(5, 5 + len(prod.calls)))


def test_the_data_cursor_skips_dropped_results_and_a_resume_starts_there():
    prod = _Producer()
    ar = AsyncRollout(prod, max_lag=0)
    try:
        assert ar.get(timeout=10).trajectories[0].task.seed == 0 and ar.cursor == 1
        time.sleep(0.2)  # the queue fills with results made at version 0; then an update lands
        prod.version = 1
        ar.set_version(1)
        used = ar.get(timeout=10).trajectories[0].task.seed
        assert ar.dropped >= 1 and used == 1 + ar.dropped and ar.cursor == used + 1
    finally:
        ar.close()
    # a resumed run starts at the cursor: the data after the last result used, none used twice
    resumed = _Producer()
    ar2 = AsyncRollout(resumed, max_lag=0, start_iteration=ar.cursor)
    try:
        assert ar2.get(timeout=10).trajectories[0].task.seed == used + 1
    finally:
        ar2.close()


def test_paused_waits_for_the_rollout_in_flight_and_holds_the_producer():
    prod = _Producer(seconds=0.3)
    ar = AsyncRollout(prod, max_lag=3)
    try:
        assert prod.active.wait(5)
        with ar.paused():
            # the rollout that was running has finished; no new one starts while paused
            assert not prod.active.is_set()
            n = len(prod.calls)
            time.sleep(0.5)
            assert len(prod.calls) == n and not prod.active.is_set()
        assert ar.get(timeout=10) is not None
    finally:
        ar.close()


def test_close_waits_for_the_rollout_in_flight():
    prod = _Producer(seconds=0.5)
    ar = AsyncRollout(prod, max_lag=1)
    assert prod.active.wait(5)
    ar.close()
    assert not prod.active.is_set() and not ar._thread.is_alive()


def test_producer_errors_reach_the_learner():
    def boom(iteration):
        raise RuntimeError("fleet down")

    ar = AsyncRollout(boom)
    try:
        with pytest.raises(RuntimeError, match="fleet down"):
            ar.get(timeout=10)
    finally:
        ar.close()


@pytest.mark.browser
def test_async_training_with_periodic_evaluation(tiny_model_dir, tmp_path):
    """Async mode shares the pool between the rollout thread and held-out evaluations."""
    out = tmp_path / "run"
    result = train(TrainConfig.build(model=tiny_model_dir, tasks=("go_home",), rollout="async", max_lag=1, iterations=2,
                               groups_per_iteration=1, group_size=2, slots=2, pool="inprocess", max_new_tokens=8,
                               eval_episodes=2, eval_every=1, top_p=0.9, out=str(out), seed=1))
    assert result.iterations == 2
    assert math.isfinite(result.success_before) and math.isfinite(result.success_after)
    assert list(result.eval_curve) == ["1"]
    reader = StoreReader(out)
    [run] = reader.list_runs()
    assert run.status == "finished"
    # the pool's browser starts on the main thread (the first evaluation) and then serves the
    # rollout thread: no episode may abort for it
    assert run.num_aborted == 0 and run.num_episodes > 0, (run.num_aborted, run.num_episodes)
    curves = reader.metrics(run.run_id)
    # held-out points at the number of updates behind them: before (0), after iteration 0 (1), after (2)
    assert [m.iteration for m in curves["eval_success"]] == [0, 1, 2]
    assert [m.value for m in curves["eval_success"]] == [result.success_before, result.eval_curve["1"],
                                                        result.success_after]
    assert [m.iteration for m in curves["policy_version"]] == [0, 1]
    for tag in ("before", "iter-1", "after"):
        assert (out / f"eval-{tag}" / "store.sqlite").is_file()


_DROPPING_TRAINER = """
import sys
import time
from rl.config import TrainConfig
from rl.trainer import Trainer

class LaggingTrainer(Trainer):
    # before iteration 1 a new policy version lands while a result waits in the queue: it lags
    # behind (--max-lag 0) and is dropped, so the data cursor moves ahead of the iteration count
    def iterate(self):
        if self.state.iteration == 1:
            deadline = time.monotonic() + 300
            while self.async_rollout._q.empty() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.policy.mark_updated()
            self.engine.sync()
        super().iterate()

LaggingTrainer(TrainConfig.build(model=sys.argv[1], out=sys.argv[2], tasks=("go_home",), rollout="async", max_lag=0,
                           iterations=3, groups_per_iteration=1, group_size=2, slots=2, pool="inprocess",
                           max_new_tokens=8, eval_episodes=0, seed=5)).run()
"""


@pytest.mark.slow  # two trainer processes: ~1 min on a quiet machine (the cursor itself: the test above)
@pytest.mark.browser
def test_a_killed_async_run_resumes_with_the_same_data_cursor(tiny_model_dir, tmp_path):
    """Killed (SIGKILL at its second checkpoint) after results were dropped for lagging: the resumed
    run trains on the data that comes after the last result used, not on data it already used."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", _DROPPING_TRAINER, tiny_model_dir, str(out)],
                            env={**env, "GUIAGENT_FAULT": "checkpoint_swap"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, err = proc.communicate(timeout=400)
    try:
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its browser
    saved = json.loads((out / "checkpoint.tmp" / "trainer_state.json").read_text())["state"]
    assert saved["iteration"] == 2 and saved["data_cursor"] >= 3, "a result was dropped before the kill"
    r = subprocess.run([sys.executable, "-m", "guiagent", "train", "--out", str(out), "--resume", str(out),
                        "--iterations", "3", "--json"], env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    reader = StoreReader(out)
    [run] = reader.list_runs()
    data = [int(m.value) for m in reader.metrics(run.run_id)["data_iteration"]]
    assert data[0] == 0 and data[1] == saved["data_cursor"] - 1
    assert data[2] == saved["data_cursor"], "the resumed run went on from the saved cursor"
    assert data == sorted(set(data)), "no iteration's data was trained on twice"
    final = json.loads((out / "checkpoint" / "trainer_state.json").read_text())["state"]
    assert final["iteration"] == 3 and final["data_cursor"] == data[2] + 1
