"""`guiagent eval` end to end with every agent kind (real Chromium, real app server, real store)."""

import json
import subprocess
import sys

import pytest

from guiagent.store import EpisodeFilter, StoreReader

pytestmark = pytest.mark.browser


def _eval(*args):
    r = subprocess.run([sys.executable, "-m", "guiagent", "eval", *args, "--json"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_eval_oracle_stores_every_episode(tmp_path):
    out = _eval("--env", "webapps", "--agent", "oracle", "--episodes", "3", "--tasks", "open_app", "go_home",
                "--out", str(tmp_path))
    assert out["episodes"] == 3 and out["success_rate"] == 1.0 and out["run_dir"] == str(tmp_path)
    reader = StoreReader(tmp_path)
    assert reader.count_episodes(EpisodeFilter(run_id=out["run_id"], outcome="success")) == 3


def _eval_in_process(**kw):
    from rl.evaluate import EvalConfig, run_eval

    return run_eval(EvalConfig.build(**kw)).to_dict()


def test_eval_random_on_miniwob(tmp_path):
    out = _eval_in_process(env="guiagent/miniwob.click-button", agent="random", episodes=2, out=str(tmp_path))
    assert out["episodes"] == 2 and 0.0 <= out["success_rate"] <= 1.0
    assert set(out["per_task"]) == {"click-button"}


def test_eval_model_agent_with_the_tiny_model(tmp_path, tiny_model_dir):
    out = _eval_in_process(env="webapps", agent="model", model=tiny_model_dir, episodes=2, tasks=("open_app",),
                           max_steps=2, slots=2, out=str(tmp_path))
    assert out["episodes"] == 2 and out["aborted"] == 0
    reader = StoreReader(tmp_path)
    [ep, _] = reader.list_episodes(EpisodeFilter(run_id=out["run_id"])).items
    detail = reader.get_episode(ep.episode_id)
    # an untrained model's replies are stored raw, with their parse errors as data
    assert all(s.response for s in detail.steps)


@pytest.mark.slow  # ~10 s: kept out of the default suite's 12-minute budget
def test_eval_at_temperature_can_redraw_unparseable_replies(tmp_path, tiny_model_dir):
    out = _eval_in_process(env="webapps", agent="model", model=tiny_model_dir, episodes=2, tasks=("open_app",),
                           max_steps=2, slots=2, temperature=1.0, resample_unparseable=2, out=str(tmp_path))
    assert out["episodes"] == 2 and out["aborted"] == 0
    reader = StoreReader(tmp_path)
    steps = [s for e in reader.list_episodes(EpisodeFilter(run_id=out["run_id"])).items
             for s in reader.get_episode(e.episode_id).steps]
    # an untrained model at temperature 1: replies were set aside, at most two a step
    assert any(s.metadata.get("rejected_replies") for s in steps)
    assert all(len(s.metadata.get("rejected_replies", ())) <= 2 for s in steps)


def test_eval_rejects_a_negative_redraw_budget():
    from rl.evaluate import EvalConfig

    with pytest.raises(ValueError, match="resample-unparseable must be >= 0"):
        EvalConfig.build(agent="model", model="m", resample_unparseable=-1)
