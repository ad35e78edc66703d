"""A browser actor killed with SIGKILL mid-rollout: its episode is marked aborted in the store,
the actor is replaced, the rollout goes on, and no completed episode is lost."""

import os
import signal

import pytest

from emulators.pool import RayEnvPool
from guiagent.store import EpisodeFilter, StoreReader, Store
from rl.agents import OraclePolicy
from rl.rollout import make_groups, run_rollout

pytestmark = [pytest.mark.ray, pytest.mark.browser]


class KillingOracle(OraclePolicy):
    """The oracle, except that on its ``at``-th call it SIGKILLs worker 0's process first."""

    def __init__(self, pool, at: int):
        self.pool, self.at, self.calls, self.killed_pid = pool, at, 0, None

    def act_batch(self, contexts, pool):
        self.calls += 1
        if self.calls == self.at:
            self.killed_pid = self.pool.worker_pids()[0]
            os.kill(self.killed_pid, signal.SIGKILL)
        return super().act_batch(contexts, pool)


@pytest.mark.slow  # ~10 s; a killed worker's replacement stays checked in tests/emulators/test_pool.py (the suite's 12-minute budget)
def test_worker_killed_mid_rollout(tmp_path):
    pool = RayEnvPool("webapps", num_workers=2, envs_per_worker=1, step_timeout_s=30)
    try:
        store = Store.open(tmp_path)
        run = store.create_run("faults", env="webapps")
        reqs = make_groups(["settings_open_section", "open_app", "settings_turn_on"], [1, 2, 3], group_size=2)
        policy = KillingOracle(pool, at=2)
        res = run_rollout(pool, policy, reqs, store=store, run_id=run, suite="webapps")
        store.close()
        assert policy.killed_pid is not None
        assert pool.worker_pids()[0] != policy.killed_pid, "the dead worker was replaced"
        aborted = [t for t in res.trajectories if t.status == "aborted"]
        completed = [t for t in res.trajectories if t.status == "completed"]
        assert len(aborted) == 1 and "worker died" in aborted[0].abort_reason
        assert len(res.trajectories) == len(reqs), "every requested episode is accounted for"
        assert all(t.success == 1.0 for t in completed), "the replacement worker solved the rest"
        reader = StoreReader(tmp_path)
        assert reader.count_episodes(EpisodeFilter(run_id=run, status="aborted")) == 1
        assert reader.count_episodes(EpisodeFilter(run_id=run, status="completed")) == len(completed)
        for t in completed:  # stored intact
            assert reader.load_trajectory(t.episode_id).steps == t.steps
    finally:
        pool.close()
