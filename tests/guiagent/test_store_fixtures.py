"""Builders shared by the store tests (no tests here), and the writer loop that the
crash and concurrency tests run in child processes:

    python -m tests.guiagent.test_store_fixtures RUN_DIR RUN_ID MODE TAG
"""

from __future__ import annotations

import io
import os
import sys
import time

from PIL import Image, ImageDraw

from guiagent.store import Store
from guiagent.types import Click, Finish, Observation, ParseError, Step, TaskSpec, Trajectory, Type

_PNG_CACHE: dict[tuple[int, int, int], bytes] = {}


def png_bytes(seed: int, width: int = 48, height: int = 32) -> bytes:
    """A small distinct PNG for ``seed`` (cached: the same seed gives the same bytes)."""
    key = (seed, width, height)
    if key not in _PNG_CACHE:
        img = Image.new("RGB", (width, height), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256))
        ImageDraw.Draw(img).rectangle([seed % width, 2, seed % width + 5, 9], fill=(255, 255, 255))
        buf = io.BytesIO()
        img.save(buf, "PNG")
        _PNG_CACHE[key] = buf.getvalue()
    return _PNG_CACHE[key]


def make_step(i: int, image_seed: int | None, *, policy_version: int = 0, reward: float = 0.0,
              last: bool = False) -> Step:
    obs = Observation(screenshot=None if image_seed is None else png_bytes(image_seed), width=48, height=32,
                      tree=f"[button] item {i}", url=f"http://127.0.0.1/app/{i}",
                      last_action_error=None if i % 3 else "element not found")
    if last:
        action, perr = Finish("success", "done"), None
    elif i % 4 == 3:
        action, perr = None, ParseError("no_action", "no action found", "I think...")
    elif i % 2:
        action, perr = Type("héllo \"quoted\"\nline", x=0.25, y=0.75, submit=True), None
    else:
        action, perr = Click(x=0.1 * (i % 10), y=0.5), None
    return Step(index=i, observation=obs, action=action, response=f"Thought: step {i}\nAction: ...",
                thought=f"step {i}", parse_error=perr, action_error="timeout" if i == 2 else None,
                reward=reward, reward_parts={"task": reward, "format": 0.0 if perr else 0.1},
                milestones=(i > 0, i > 1), terminated=last, truncated=False,
                policy_version=policy_version, latency_ms=12.5 + i)


def make_traj(n: int, *, steps: int = 3, pixels: bool = True, success: float = 1.0,
              task_id: str = "todo", suite: str = "webapps", agent: str = "model", group_id: str | None = None,
              policy_version: int = 0, reward: float = 0.25, status: str = "completed",
              images: int | None = None) -> Trajectory:
    """Episode ``n``: deterministic content, so a test can rebuild it to compare.

    ``images`` bounds the number of distinct screenshots (to exercise dedupe).
    """
    def seed(i: int) -> int | None:
        if not pixels:
            return None
        s = n * 100 + i
        return s % images if images else s

    spec = TaskSpec(suite=suite, task_id=task_id, seed=n, goal=f"goal {n}: add \"milk\"", max_steps=8,
                    params={"n": n, "items": ["a", "b"]})
    st = tuple(make_step(i, seed(i), policy_version=policy_version, reward=reward, last=(i == steps - 1))
               for i in range(steps))
    final = Observation(png_bytes(10_000 + n) if pixels else None, 48, 32, url="http://127.0.0.1/end")
    return Trajectory(episode_id=f"ep-{n:06d}", task=spec, steps=st, success=success, status=status,
                      abort_reason="device died" if status == "aborted" else None, final_observation=final,
                      agent=agent, group_id=group_id, metadata={"n": n, "tag": "t"})


def writer_loop(run_dir: str, run_id: str, mode: str, tag: str) -> None:
    """Write episodes until killed (``loop``), write a huge blob (``bigblob``), or write 40 once ``RUN_DIR/go`` exists (``count``).

    Prints ``opened``, then ``completed N`` after each completed episode and
    ``inside N`` once an episode has steps but is not complete yet.
    """
    store = Store.open(run_dir)
    print("opened", flush=True)
    while mode == "count" and not os.path.exists(os.path.join(run_dir, "go")):
        time.sleep(0.005)  # start line, so that both writers really overlap
    n = 0
    while True:
        traj = make_traj(n, images=7) if mode == "count" else make_traj(n + (10_000 if tag == "b" else 0))
        ep = store.begin_episode(run_id, traj.task, traj.agent, episode_id=f"{tag}-{traj.episode_id}",
                                 metadata=traj.metadata)
        for step in traj.steps:
            ep.add_step(step)
            if mode == "loop" and step.index == 1:
                print("inside", n, flush=True)
                time.sleep(0.02)
            if mode == "bigblob" and n == 2 and step.index == 1:
                big = b"\x89PNG\r\n\x1a\n" + os.urandom(128 << 20)
                print("bigblob", flush=True)
                store.put_blob(big)
        ep.complete(traj.success, traj.final_observation, metadata=traj.metadata)
        print("completed", n, flush=True)
        n += 1
        if mode == "count" and n == 40:
            return
        if mode == "count":  # a gap between episodes, as a rollout worker has: the other writer gets the lock
            time.sleep(0.003)


if __name__ == "__main__":
    writer_loop(*sys.argv[1:5])
