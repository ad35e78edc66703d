"""Golden records of every webapps task: what each seed draws, and what its oracle does.

The fixture ``golden/webapps_tasks.json`` was written from the code before a refactor and
holds, for every registered task and the seeds in ``SEEDS``:

* the class: name, module, template, difficulty, max_steps, suite, shuffled lists;
* per seed, without a browser: the sampled parameters, the goal text, the start page, a
  digest of the start world (``initial_state``: the world of the seed as ``prepare`` edits
  it), and ``success``/``progress`` on that world;
* per seed, from an oracle episode on a real Chromium against the real app server: the
  score before acting, every oracle action, the milestones after reset and after each step,
  the success, a digest of the session state at the end, and the score of the recorded
  answer (answer tasks) on that state, which the default test checks without a browser;
* the public names of every task module (each must stay importable).

The default tests compare the records without a browser and replay the oracle episode of seed
0 of every task step by step (~20 s); ``-m slow`` replays seeds 1-4 too (all 285 episodes take
~1.5 minutes on 2 cores).

Regenerate (review the diff: any change there is a change of behaviour)::

    python3 -m tests.emulators.test_webapps_golden --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from emulators.base import GuiEnv
from emulators.suites.webapps import SUITE, TASKS
from guiagent.types import action_to_dict
from tests.sweeps import WEBAPPS_CHECK_DEFAULT, sweep

SEEDS = tuple(range(5))
FIXTURE = Path(__file__).parent / "golden" / "webapps_tasks.json"
MODULES = ("base", "easy", "contacts", "messages", "calendar", "notes", "system", "expenses", "clock", "todo",
           "composite", "shuffled")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def class_record(cls: type) -> dict[str, Any]:
    return {"class": cls.__name__, "module": cls.__module__, "template": cls.template,
            "difficulty": cls.difficulty, "max_steps": cls.max_steps, "suite": cls.suite,
            "shuffle": list(cls.shuffle)}


def static_record(cls: type, seed: int) -> dict[str, Any]:
    """What a seed gives without a browser: parameters, goal, start page and world, scores on it."""
    params = cls.sample_params(random.Random(seed))
    task = cls(params)
    world = task.initial_state()
    return {"params": json.loads(json.dumps(params)), "goal": task.goal, "start": task.start_page(),
            "world": _digest(world),
            "initial_success": bool(task.success(world, None)),
            "initial_milestones": [bool(m) for m in task.progress(world)]}


def oracle_record(cls: type, seed: int, device: Any) -> dict[str, Any]:
    """One oracle episode on ``device``: score before, actions, milestone trace, success, end state."""
    env = GuiEnv(device, cls)
    _, info = env.reset(seed=seed)
    task = env.task
    before = task.evaluate(device, None)
    trace = [[bool(m) for m in info["milestones"]]]
    actions: list[dict[str, Any] | None] = []
    success = None
    try:
        for _ in range(env.max_steps):
            action = env.oracle_action()
            if action is None:
                actions.append(None)
                break
            actions.append(action_to_dict(action))
            _, reward, terminated, truncated, info = env.step(action)
            trace.append([bool(m) for m in info["step"].milestones])
            if terminated or truncated:
                success = reward
                break
        final = task.state()
    finally:
        task.teardown(device)
    answer = next((a["text"] for a in reversed(actions) if a and a["kind"] == "answer"), None)
    return {"before": before, "actions": actions, "milestones": trace, "success": success,
            "final": _digest(final), "answer": answer,
            "answer_success": bool(task.success(final, answer)) if answer is not None else None}


def public_names(module: ModuleType) -> list[str]:
    """Names a user may import from ``module``: its ``__all__`` and every public name it binds that is
    not a module or something defined elsewhere (``Answer`` imported into a task module is not its name)."""
    out = set(getattr(module, "__all__", ()))
    for name, obj in vars(module).items():
        if name.startswith("_") or name == "annotations" or isinstance(obj, ModuleType):
            continue
        if getattr(obj, "__module__", module.__name__) != module.__name__:
            continue
        out.add(name)
    return sorted(out)


def _module(name: str) -> ModuleType:
    return import_module(f"emulators.suites.webapps.tasks.{name}")


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_the_same_tasks_are_registered(golden):
    assert sorted(TASKS) == sorted(golden["tasks"])
    assert list(golden["seeds"]) == list(SEEDS)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_class_and_seeds_match_the_golden_record(task_id, golden):
    want = golden["tasks"][task_id]
    cls = TASKS[task_id]
    assert class_record(cls) == want["class"]
    for seed in SEEDS:
        got = static_record(cls, seed)
        assert got == {k: want["seeds"][str(seed)][k] for k in got}, f"{task_id} seed {seed}"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_recorded_answers_still_score(task_id, golden):
    """The oracle's recorded answer scores as recorded on the start world (answers read no state)."""
    cls = TASKS[task_id]
    for seed in SEEDS:
        rec = golden["tasks"][task_id]["seeds"][str(seed)]
        if rec["answer"] is None:
            continue
        task = cls(rec["params"])
        world = task.initial_state()
        assert rec["answer_success"] is True and task.success(world, rec["answer"]), f"{task_id} seed {seed}"
        assert not task.success(world, "I do not know"), f"{task_id} seed {seed}"


def test_public_names_stay_importable(golden):
    for name in MODULES:
        module = _module(name)
        missing = [n for n in golden["names"][name] if not hasattr(module, n)]
        assert not missing, f"tasks.{name} lost {missing}"
    for task_id, rec in golden["tasks"].items():
        cls = TASKS[task_id]
        if not rec["class"]["shuffle"]:  # the shuffled variants were never bound to a module name
            assert getattr(import_module(cls.__module__), cls.__name__) is cls, task_id


@pytest.fixture(scope="module")
def device():
    from emulators.browser import BrowserConfig, launch_browser  # lazy: Playwright only for browser tests
    handle = launch_browser(BrowserConfig.phone())
    dev = SUITE.make_device(browser=handle, tree="none")
    yield dev
    dev.close()
    handle.close()
    SUITE.close()


def _replay(task_id: str, seed: int, golden: dict[str, Any], device: Any) -> None:
    want = golden["tasks"][task_id]["seeds"][str(seed)]
    got = oracle_record(TASKS[task_id], seed, device)
    assert got == {k: want[k] for k in got}, f"{task_id} seed {seed}"


@pytest.mark.browser
@pytest.mark.parametrize("task_id", sweep(sorted(TASKS), set(TASKS) - WEBAPPS_CHECK_DEFAULT))
def test_oracle_episode_of_seed0_matches_the_golden_record(task_id, golden, device):
    """By default the tasks test_webapps_tasks.py does not run by default (tests/sweeps.py); all with
    -m slow."""
    _replay(task_id, 0, golden, device)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("seed", SEEDS[1:])
@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_oracle_episodes_match_the_golden_record(task_id, seed, golden, device):
    _replay(task_id, seed, golden, device)


def write(path: Path, *, static_only: bool = False) -> dict[str, Any]:
    """Record every task and seed (in a browser unless ``static_only``) into ``path``."""
    old = json.loads(path.read_text()) if static_only and path.exists() else None
    out: dict[str, Any] = {"seeds": list(SEEDS), "names": {m: public_names(_module(m)) for m in MODULES},
                           "tasks": {}}
    device = handle = None
    if not static_only:
        from emulators.browser import BrowserConfig, launch_browser  # lazy: Playwright, see device()
        handle = launch_browser(BrowserConfig.phone())
        device = SUITE.make_device(browser=handle, tree="none")
    try:
        for task_id in sorted(TASKS):
            cls = TASKS[task_id]
            seeds = {}
            for seed in SEEDS:
                rec = static_record(cls, seed)
                if device is not None:
                    rec.update(oracle_record(cls, seed, device))
                elif old is not None:
                    rec.update({k: v for k, v in old["tasks"][task_id]["seeds"][str(seed)].items() if k not in rec})
                seeds[str(seed)] = rec
            out["tasks"][task_id] = {"class": class_record(cls), "seeds": seeds}
            print(task_id, [seeds[str(s)].get("success") for s in SEEDS], file=sys.stderr, flush=True)
    finally:
        if device is not None:
            device.close()
            handle.close()
        SUITE.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(_dumps(out))
    tmp.replace(path)
    return out


def _dumps(golden: dict[str, Any]) -> str:
    """The fixture as JSON with one line per seed record (small, and a diff names the seed)."""
    def one(value: Any) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    tasks = []
    for task_id, rec in sorted(golden["tasks"].items()):
        seeds = ",\n".join(f"   {one(s)}: {one(r)}" for s, r in rec["seeds"].items())
        tasks.append(f'  {one(task_id)}: {{"class": {one(rec["class"])}, "seeds": {{\n{seeds}}}}}')
    names = ",\n".join(f"  {one(m)}: {one(n)}" for m, n in golden["names"].items())
    return (f'{{"seeds": {one(golden["seeds"])},\n "names": {{\n{names}}},\n'
            f' "tasks": {{\n' + ",\n".join(tasks) + "}}\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Write the webapps golden records (tests/emulators/golden/).")
    ap.add_argument("--write", action="store_true", required=True, help="record and overwrite the fixture")
    ap.add_argument("--static-only", action="store_true",
                    help="re-record only what needs no browser, keeping the recorded oracle episodes")
    args = ap.parse_args()
    write(FIXTURE, static_only=args.static_only)
