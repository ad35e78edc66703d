"""A real store for the web UI tests: SQLite run directories with PNG screenshots made by PIL.

Layout (discovery one and two levels deep)::

    <root>/train/            run "grpo-demo" (running, training metrics, judgements)
    <root>/evals/held-out/   run "eval-demo" (finished, no metrics: per-task bars)
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from guiagent.store import Store
from guiagent.types import (
    Click, Drag, Finish, Key, LongPress, Observation, ParseError, Scroll, Step, Swipe, TaskSpec, Trajectory,
    Type,
)
from webui import AppConfig, create_app

W, H = 360, 640
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def png(seed: int, text: str = "") -> bytes:
    """A small phone-shaped screen: a coloured app bar, some rows, a label."""
    img = Image.new("RGB", (W, H), (248, 249, 251))
    d = ImageDraw.Draw(img)
    d.rectangle([0, 0, W, 56], fill=((seed * 53) % 200 + 30, (seed * 97) % 200 + 30, 180))
    for i in range(6):
        y = 80 + i * 70
        d.rounded_rectangle([16, y, W - 16, y + 56], radius=8, fill=(255, 255, 255), outline=(220, 224, 230))
        d.text((30, y + 20), f"row {i} · {seed}", fill=(40, 40, 40))
    d.text((16, 20), text or f"screen {seed}", fill=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def obs(seed: int, **kw) -> Observation:
    return Observation(screenshot=png(seed), width=W, height=H, **kw)


def step(i: int, action, *, seed: int, thought: str = "", response: str | None = None, version: int = 0,
         parse_error: ParseError | None = None, action_error: str | None = None, reward: float = 0.0,
         parts: dict | None = None, milestones=(), terminated: bool = False) -> Step:
    return Step(index=i, observation=obs(seed, url=f"http://127.0.0.1/app/{seed}"), action=action,
                response=response if response is not None else f"Action: {action!r}", thought=thought,
                parse_error=parse_error, action_error=action_error, reward=reward,
                reward_parts=parts or {"task": reward, "progress": 0.0}, milestones=tuple(milestones),
                terminated=terminated, policy_version=version, latency_ms=12.5)


def every_action_trajectory(eid: str, version: int = 3) -> Trajectory:
    """One episode whose steps use every overlay kind, an error of each sort, and HTML in model text."""
    steps = [
        step(0, Click(0.25, 0.2), seed=1, thought="Open the first row.", version=version,
             parts={"task": 0.0, "progress": 0.5}, reward=0.5, milestones=(True, False)),
        step(1, LongPress(0.5, 0.5), seed=2, thought="Hold for the menu.", version=version),
        step(2, Type(text=XSS, x=0.5, y=0.3, submit=True), seed=3, thought=f"I will type {XSS}",
             response=f"Thought: {XSS}\nAction: type(content='{XSS}')", version=version),
        step(3, Swipe(0.5, 0.8, 0.5, 0.2), seed=4, version=version),
        step(4, Drag(0.2, 0.2, 0.8, 0.6), seed=5, version=version),
        step(5, Scroll("down"), seed=6, version=version),
        step(6, Key("Enter"), seed=7, version=version, action_error="key <b>Enter</b> not allowed here"),
        step(7, None, seed=8, version=version, response=f"garbage {XSS}",
             parse_error=ParseError("no_action", f"no action in {XSS}", "garbage"),
             parts={"task": 0.0, "parse": -0.1}, reward=-0.1),
        step(8, Finish("success"), seed=9, version=version, reward=1.0,
             parts={"task": 1.0, "progress": 0.5}, milestones=(True, True), terminated=True),
    ]
    final = Observation(screenshot=png(10, "done"), width=W, height=H, url="http://127.0.0.1/app/done",
                        last_action_error=f"final {XSS}")
    return Trajectory(episode_id=eid, task=TaskSpec("webapps", "todo_add", 7, f"Add a todo {XSS}", 12),
                      steps=tuple(steps), success=1.0, agent="model", group_id="g-1", final_observation=final)


def short_trajectory(eid: str, task: str, seed: int, success: float, n: int, *, version: int = 0,
                     agent: str = "model") -> Trajectory:
    steps = tuple(step(i, Click(0.1 + 0.08 * i, 0.5), seed=seed + i, thought=f"step {i} of {eid}",
                       version=version, reward=success if i == n - 1 else 0.0) for i in range(n))
    return Trajectory(episode_id=eid, task=TaskSpec("webapps", task, seed, f"Do {task}", 10), steps=steps,
                      success=success, agent=agent)


@dataclass(frozen=True)
class Runs:
    root: Path
    train_key: str
    eval_key: str
    rich_id: str      # every action kind, XSS text, judged (judge agrees)
    sibling_id: str   # same task as rich_id
    disagree_id: str  # judged, judge disagrees with the rule outcome


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    root = tmp_path_factory.mktemp("webui_runs")
    with Store.open(root / "train") as s:
        rid = s.create_run("grpo-demo", env="guiagent/webapps.todo_add", algo="grpo", model="tiny-qwen",
                           config={"lr": 1e-5, "note": XSS}, run_id="trainrun0001")
        s.write_trajectory(rid, every_action_trajectory("ep-rich"), started_at=1000.0)
        s.write_trajectory(rid, short_trajectory("ep-sib", "todo_add", 11, 0.0, 3, version=2),
                           started_at=1001.0)
        for k in range(12):
            s.write_trajectory(rid, short_trajectory(f"ep-{k:02d}", ("todo_add", "notes_edit")[k % 2], 20 + k,
                                                     float(k % 3 == 0), 1 + k % 4, version=k // 4,
                                                     agent="model" if k % 5 else "oracle"),
                               started_at=1002.0 + k)
        s.add_judgement("ep-rich", "vlm", 0.9, verdict={"verdict": "success"}, reason=f"looks done {XSS}")
        s.add_judgement("ep-01", "vlm", 0.8, verdict={"verdict": "success"}, reason="the todo is there")
        s.add_judgement("ep-rich", "vlm", 0.7, step=2, reason="typed the right text")
        for it in range(10):
            s.log_metrics(rid, it, {"success_rate": it / 10, "reward/task": it / 12, "reward/progress": 0.3,
                                    "episode_length": 8 - it / 3, "parse_errors": max(0.0, 0.5 - it / 20),
                                    "loss": 1.0 / (it + 1)})
        for it, seen, unseen in ((0, 0.4, 0.3), (5, 0.6, 0.5), (10, 0.8, 0.7)):  # held-out: before, during, after
            s.log_metrics(rid, it, {"eval_success": seen, "eval_success_unseen": unseen})
    with Store.open(root / "evals" / "held-out") as s:
        eid = s.create_run("eval-demo", env="webapps", algo="eval", model="oracle", run_id="evalrun0001")
        tasks = ("todo_add", "notes_edit", "contacts_add")
        s.write_trajectories(eid, [short_trajectory(f"ev-{k}", tasks[k % 3], 100 + k,
                                                    float(k % 3 == 0 or k == 2), 2) for k in range(6)],
                             started_at=2000.0)
        s.set_run_status(eid, "finished")
    return Runs(root=root, train_key="train~trainrun0001", eval_key="evals.held-out~evalrun0001", rich_id="ep-rich",
                sibling_id="ep-sib", disagree_id="ep-01")


@pytest.fixture(scope="session")
def app(runs):
    return create_app(AppConfig(runs=runs.root, refresh_s=0.5))


@pytest.fixture()
def client(app):
    return app.test_client()
