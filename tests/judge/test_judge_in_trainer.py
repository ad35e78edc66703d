"""The trainer learns from the judge's stored reward part, and logs its calibration against the rule."""

import pytest

from guiagent.store import EpisodeFilter, StoreReader
from judge.settings import JudgeSettings
from rl.config import TrainConfig
from tests.judge.judge_server import API_KEY

pytestmark = pytest.mark.browser


def test_judge_score_is_a_stored_reward_part_and_calibration_is_logged(tiny_model_dir, judge_server, tmp_path,
                                                                        monkeypatch):
    from rl.trainer import train

    monkeypatch.setenv("GUIAGENT_JUDGE_KEY", API_KEY)
    judge = JudgeSettings(model=judge_server.url, served_model="verdict-success", api_key_env="GUIAGENT_JUDGE_KEY",
                          weight=0.5, retries=0, timeout=30.0)
    out = tmp_path / "run"
    r = train(TrainConfig.build(model=tiny_model_dir, tasks=("go_home",), iterations=1, groups_per_iteration=1,
                          group_size=2, slots=2, pool="inprocess", max_new_tokens=8, eval_episodes=0,
                          filter_zero_variance=False, judge=judge, out=str(out), seed=1))
    reader = StoreReader(out)
    eps = reader.list_episodes(EpisodeFilter(run_id=r.run_id), limit=10).items
    assert len(eps) == 2
    for e in eps:
        last = reader.get_episode(e.episode_id).steps[-1]
        assert last.reward_parts["judge"] == pytest.approx(0.9)  # the raw score; weighted 0.5 in the reward
        assert len(reader.judgements(e.episode_id)) == 1
    curves = reader.metrics(r.run_id)
    assert curves["judge/judged"][0].value == 2.0 and curves["judge/missing"][0].value == 0.0
    assert curves["judge/agreement"][0].value == pytest.approx(0.0)  # the judge says success, the rule failure


def test_a_judge_with_weight_zero_is_refused_unless_log_only():
    with pytest.raises(ValueError, match="--judge.mode log"):
        TrainConfig.build(judge=JudgeSettings(model="http://127.0.0.1:1/v1"))
    TrainConfig.build(judge=JudgeSettings(model="http://127.0.0.1:1/v1", mode="log"))
