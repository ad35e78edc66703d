"""The replay shows the credit a trainer gave each step (advantage; value and return with a critic)."""

from guiagent.store import Store
from guiagent.types import Click, Finish, TaskSpec, Trajectory
from tests.webui.conftest import step
from webui import AppConfig, create_app


def test_replay_page_and_api_show_per_step_advantages_and_values(tmp_path):
    store = Store.open(tmp_path / "ppo")
    run = store.create_run("ppo-webapps", algo="ppo")
    traj = Trajectory("ep-credit", TaskSpec("webapps", "settings_dark_theme", 3, "turn on the dark theme"),
                      (step(0, Click(0.5, 0.57), seed=1), step(1, Finish("success"), seed=2, reward=1.0)),
                      success=1.0, group_id="g")
    store.write_trajectory(run, traj)
    store.add_step_credit([("ep-credit", 0, -0.4375, 0.8125, 0.375, {"gae": -0.4375}),
                           ("ep-credit", 1, 0.25, 0.75, 1.0, {})], iteration=0, algo="ppo")
    store.add_step_credit([("ep-credit", 0, 0.625, 0.3125, 0.9375, {})], iteration=4, algo="ppo")
    store.close()
    client = create_app(AppConfig(runs=tmp_path, refresh_s=0.5)).test_client()
    html = client.get("/episodes/ep-credit").get_data(as_text=True)
    assert html.count("<h4>Credit") == 2 and "iteration 5" in html  # the latest iteration first
    assert "value V(s)" in html and ">0.625<" in html and ">0.312<" in html and "it 1 A -0.438" in html
    api = client.get("/api/episodes/ep-credit").get_json()
    first = api["step_credit"]["0"]
    assert [c["iteration"] for c in first] == [4, 0] and first[1]["detail"] == {"gae": -0.4375}
    assert api["step_credit"]["1"][0]["value"] == 0.75
