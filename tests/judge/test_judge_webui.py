"""The web UI's judge pages and reward weights: a real store, a real report file, Flask's test client."""

from __future__ import annotations

import io
import json
import re

import pytest
from PIL import Image

from guiagent.store import Store
from guiagent.types import Click, Finish, Observation, Step, TaskSpec, Trajectory
from judge.vlm import Verdict, store_verdict
from webui import AppConfig, create_app

XSS = '<script>alert("x")</script>'


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (90, 90, 90)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def ui(tmp_path):
    run_dir = tmp_path / "train"
    config = {"rewards": {"task": 1.0, "progress": 0.5},
              "judge": {"model": "http://127.0.0.1:9/v1", "weight": 0.25, "mode": "reward"}}
    with Store.open(run_dir) as store:
        run = store.create_run("grpo-judged", env="webapps", config=config)
        obs = Observation(_png(), 64, 48)
        steps = (Step(0, obs, Click(0.5, 0.5), reward=0.25, reward_parts={"task": 0.0, "progress": 0.5}),
                 Step(1, obs, Finish(), reward=0.975, terminated=True,
                      reward_parts={"task": 1.0, "progress": -0.5, "judge": 0.9}))
        spec = TaskSpec("webapps", "wifi", 3, "Turn on Wi-Fi")
        traj = Trajectory("ep-judged", spec, steps, success=1.0, final_observation=obs)
        eid = store.write_trajectory(run, traj)
        store_verdict(store, eid, Verdict(True, 0.9, "Wi-Fi shows On", shown_steps=(1,), votes=(0.8, 1.0)),
                      "vlm", rule_success=1.0, extra={"weight": 0.25, "mode": "reward"})
        store.log_metrics(run, 0, {"reward/progress": 0.0, "reward/judge": 0.9, "success_rate": 1.0})
    report = {"version": 1, "episodes": 2, "judged": 2, "missing": 0, "missing_reasons": {}, "calls": 2,
              "seconds": 1.5, "judge": {"model": "http://judge/v1", "votes": 1, "evidence": "key_screens"},
              "calibration": {"n": 2, "tp": 0, "fp": 1, "tn": 1, "fn": 0, "agreement": 0.5, "precision": 0.0,
                              "recall": None, "kappa": 0.0},
              "disagreements": [{"episode_id": eid, "task_id": "wifi", "seed": 3, "goal": "Turn on Wi-Fi",
                                 "rule_success": 0.0, "judge_success": True, "judge_score": 0.7,
                                 "judge_reason": "switch looks on " + XSS},
                                {"episode_id": "elsewhere", "task_id": "x", "rule_success": 1.0,
                                 "judge_success": False, "judge_score": 0.1, "judge_reason": "no"}],
              "missing_episodes": []}
    (tmp_path / "judge_eval.json").write_text(json.dumps(report))
    (run_dir / "judge_eval_broken.json").write_text("{not json")
    app = create_app(AppConfig(runs=tmp_path))
    return app.test_client(), eid


def test_replay_shows_reward_parts_with_the_runs_weights_and_the_verdict(ui):
    client, eid = ui
    html = client.get(f"/episodes/{eid}").get_data(as_text=True)
    assert "×0.5" in html and "×0.25" in html and "×1" in html          # progress, judge, task
    assert "judge: success" in html and "rule outcome 1" in html and "reward mode, weight 0.25" in html
    assert "votes 0.8, 1" in html and "saw the screens of steps 1" in html


def test_charts_carry_the_reward_weights(ui):
    client, _ = ui
    html = client.get("/").get_data(as_text=True)
    [weights] = re.findall(r'data-reward-weights="([^"]*)"', html)
    assert json.loads(weights.replace("&#34;", '"')) == {"task": 1.0, "progress": 0.5, "judge": 0.25,
                                                         "parse": 1.0, "invalid": 1.0, "step": 1.0}


def test_judge_reports_list_and_page_with_disagreements(ui):
    client, eid = ui
    listing = client.get("/judge").get_data(as_text=True)
    assert "judge_eval.json" in listing and "http://judge/v1" in listing
    assert "train/judge_eval_broken.json" in listing and "unreadable" in listing
    r = client.get("/judge/report/0")
    page = r.get_data(as_text=True)
    assert r.status_code == 200
    assert XSS not in page and "&lt;script&gt;" in page                  # the judge's reason, escaped
    assert f'href="/episodes/{eid}"' in page                              # a link to the replay
    assert "elsewhere" in page and "Cohen" in page and ">0.5<" in page
    assert client.get("/judge/report/1").status_code == 404             # the broken one is not opened
    assert client.get("/judge/report/9").status_code == 404


@pytest.mark.browser
def test_reward_chart_legend_names_each_part_with_its_weight_in_chromium(ui, tmp_path):
    import threading

    from werkzeug.serving import make_server

    from emulators.browser import BrowserConfig, launch_browser

    client, _ = ui
    app = client.application
    server = make_server("127.0.0.1", 0, app, threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    handle = launch_browser(BrowserConfig())
    try:
        page = handle.browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{server.server_port}/")
        page.wait_for_selector(".charts .legend")
        legend = page.locator(".charts .legend").first.text_content()
        assert "reward/judge ×0.25" in legend and "reward/progress ×0.5" in legend
        assert not errors
    finally:
        handle.close()
        server.shutdown()
        t.join(5)
