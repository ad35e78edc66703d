"""bench/goal_reading.py: a model's greedy replies with goals as recorded, framed and one word longer."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser


@pytest.mark.slow  # ~10 s: kept out of the default suite's 12-minute budget
def test_goal_reading_replays_named_steps_three_ways(tmp_path, tiny_model_dir):
    demos = tmp_path / "demos"
    subprocess.run([sys.executable, "-m", "guiagent", "eval", "--env", "webapps", "--agent", "oracle", "--episodes",
                    "2", "--tasks", "open_app", "--seed", "0", "--device", "marks", "true", "--out", str(demos)],
                   check=True, capture_output=True, timeout=240, cwd=ROOT)
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    from rl.agents import tiny_model_settings

    tiny_model_settings("marks").save(str(model))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "goal_reading.py"), "--model", str(model), "--data",
                           str(demos), "--threads", "1"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fig = json.loads(proc.stdout.strip().splitlines()[-1])
    assert fig["examples"] == 2  # each episode's tap names its app; the finish names nothing
    for way in ("recorded", "framed", "one_more_word"):
        assert 0.0 <= fig[f"accuracy_{way}"] <= 1.0 and fig[f"distinct_answers_{way}"] >= 1
    assert all(set(v) == {"recorded", "framed", "one_more_word"} for v in fig["per_target"].values())
    assert sum(int(v["recorded"].split("/")[1]) for v in fig["per_target"].values()) == 2


def test_goal_reading_bad_input_is_one_line(tmp_path, tiny_model_dir):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "goal_reading.py"), "--model", tiny_model_dir,
                           "--data", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no guiagent_agent.json" in proc.stderr
    assert "Traceback" not in proc.stderr
