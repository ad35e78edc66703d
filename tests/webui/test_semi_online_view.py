"""A semi-online replay shows the recorded action beside the policy's, matches and patches marked."""

from guiagent.store import EpisodeFilter, Store, StoreReader
from guiagent.types import Click, Finish, NavigateBack, Step, TaskSpec, Trajectory
from rl.agents import RandomPolicy
from rl.patching import PatchConfig
from rl.replay import run_semi_online
from tests.webui.conftest import obs
from webui import AppConfig, create_app


def _recorded() -> Trajectory:
    steps = (Step(0, obs(1), Click(0.5, 0.2), response="tap", thought="open the list"),
             Step(1, obs(2), NavigateBack(), response="back"),
             Step(2, obs(3), Finish("success"), response="done"))
    return Trajectory("rec-1", TaskSpec("webapps", "open_app", 7, "open the app"), steps, success=1.0)


def test_replay_page_and_api_show_recorded_and_policy_actions(tmp_path):
    run_dir = tmp_path / "semi"
    store = Store.open(run_dir)
    run = store.create_run("semi-demo")
    res = run_semi_online(RandomPolicy(seed=3), [_recorded()], group_size=2, patch=PatchConfig("recorded", 1),
                          store=store, run_id=run)
    store.close()
    assert len(res.trajectories) == 2
    [ep, *_] = StoreReader(run_dir).list_episodes(EpisodeFilter(run_id=run)).items
    client = create_app(AppConfig(runs=tmp_path, refresh_s=0.5)).test_client()
    page = client.get(f"/episodes/{ep.episode_id}")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "Recorded action" in html and "recorded-overlay" in html
    assert "mismatch" in html or "matched" in html
    detail = client.get(f"/api/episodes/{ep.episode_id}").get_json()
    first = detail["steps"][0]
    assert first["semi"]["recorded_action"]["kind"] == "click"
    assert isinstance(first["semi"]["matched"], bool) and first["semi"]["overlay"]["shapes"]
    patched = [s for s in detail["steps"] if s["semi"] and s["semi"]["patched"]]
    assert all(not s["semi"]["matched"] for s in patched)


def test_replies_set_aside_are_shown_escaped_under_the_raw_output(tmp_path):
    run_dir = tmp_path / "redrawn"
    store = Store.open(run_dir)
    run = store.create_run("redrawn")
    w = store.begin_episode(run, TaskSpec("webapps", "open_app", 1, "open the app"), "model")
    w.add_step(Step(0, obs(1), Click(0.5, 0.2), response='{"action": {"kind": "click", "x": 0.5, "y": 0.2}}',
                    metadata={"rejected_replies": ['{"action": {"kind": "click", "x": 0.5.', "<script>alert(1)</script>",
                                                   7]}))
    w.add_step(Step(1, obs(2), Finish("success"), response="done", terminated=True))
    w.complete(1.0)
    store.close()
    [ep] = StoreReader(run_dir).list_episodes(EpisodeFilter(run_id=run)).items
    client = create_app(AppConfig(runs=tmp_path, refresh_s=0.5)).test_client()
    html = client.get(f"/episodes/{ep.episode_id}").get_data(as_text=True)
    assert "2 unparseable replies drawn again before this one" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    detail = client.get(f"/api/episodes/{ep.episode_id}").get_json()
    assert detail["steps"][0]["rejected_replies"] == ['{"action": {"kind": "click", "x": 0.5.', "<script>alert(1)</script>"]
    assert detail["steps"][1]["rejected_replies"] == []
