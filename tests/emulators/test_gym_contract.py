"""Gymnasium's tools on the registered envs: space utilities, vector envs, determinism flags, rendering.

* ``UnicodeText`` observations go through ``gymnasium.spaces.utils.flatten``/``unflatten`` and the
  vector envs' shared memory (code points, not indexes into the sampling charset).
* ``gymnasium.make_vec(id, num_envs=2, vectorization_mode="async")`` with its defaults (the
  ``fork`` context, shared memory) resets, steps an oracle episode to reward 1 in each worker,
  autoresets, takes random actions and closes, leaving no Chromium, driver or app server running:
  each forked worker starts its own browser and server instead of reusing the parent's copies.
* MiniWoB pages that cannot reset deterministically are registered ``nondeterministic`` and pass
  Gymnasium's ``check_env``.
* ``render_mode="rgb_array_list"`` and ``"human"`` (with an offscreen SDL driver; without a
  display, a clear error).

The parent's envs share the session's Chromium; each vector env worker launches its own.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import time
import warnings
from urllib.parse import urlsplit
from urllib.request import urlopen

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import utils as space_utils
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import emulators  # noqa: F401  (registers the envs)
from emulators import browser_support
from emulators.base import ActionText, GuiEnv, UnicodeText, observation_space
from emulators.suites import registration
from emulators.suites.miniwob import SUITE as MINIWOB
from emulators.suites.miniwob.tasks import NONDETERMINISTIC
from emulators.suites.webapps import SUITE as WEBAPPS
from emulators.suites.webapps.server import shared_server, stop_shared_server
from guiagent.types import action_to_dict
from tests.emulators.gym_checks import checked_env

TEXTS = ["", "a", "line one\nline two\ttab", "é → 日本語", "emoji 😀👍🏽", "nul \0 inside", "\ud800 lone surrogate",
         "x" * 32]


# --- UnicodeText through Gymnasium's space utilities (no browser) ------------------------------------

def test_unicode_text_flattens_by_code_point_and_round_trips():
    space = UnicodeText(32)
    flat_space = space_utils.flatten_space(space)
    assert isinstance(flat_space, gymnasium.spaces.Box) and flat_space.shape == (32,)
    assert flat_space.dtype == np.int32 and space_utils.flatdim(space) == 32
    for text in TEXTS:
        assert text in space
        flat = space_utils.flatten(space, text)
        assert flat in flat_space, text
        assert space_utils.unflatten(space, flat) == text
    assert list(space_utils.flatten(space, "a\n")[:3]) == [ord("a"), ord("\n"), -1]
    for _ in range(20):  # samples (printable ASCII) round-trip too
        sample = space.sample()
        assert space_utils.unflatten(space, space_utils.flatten(space, sample)) == sample


def test_actions_with_any_text_flatten_and_round_trip():
    space = ActionText()
    for text in ("Sauté", "Schönberg\n", "東京 🙂"):
        raw = '{"kind": "type", "text": "%s", "submit": false}' % text.replace("\n", "\\n")
        assert raw in space
        flat = space_utils.flatten(space, raw)
        assert flat.shape == (space.max_length,) and space_utils.unflatten(space, flat) == raw
    assert space_utils.flatten_space(space).shape == (space.max_length,)


def test_observation_dict_flattens_and_round_trips():
    obs_space = observation_space(6, 4)  # width, height
    obs = {"screenshot": np.arange(72, dtype=np.uint8).reshape(4, 6, 3), "goal": "Öffne die App „Notizen“.",
           "tree": '- banner\n- main:\n  - link "Contacts 📇":\n    - /url: /s/abc/contacts', "url": "http://x/ü",
           "last_action_error": ""}
    assert obs in obs_space
    flat = space_utils.flatten(obs_space, obs)
    assert flat in space_utils.flatten_space(obs_space) and flat.shape == (space_utils.flatdim(obs_space),)
    back = space_utils.unflatten(obs_space, flat)
    assert {k: v for k, v in back.items() if k != "screenshot"} == {k: v for k, v in obs.items() if k != "screenshot"}
    assert np.array_equal(back["screenshot"], obs["screenshot"])


def test_shared_memory_holds_any_text_and_reads_what_was_written_last():
    space = UnicodeText(32)
    memory = create_shared_memory(space, n=2)
    seen = read_from_shared_memory(space, memory, n=2)  # what AsyncVectorEnv reads once, at start
    for first, second in zip(TEXTS, reversed(TEXTS)):
        write_to_shared_memory(space, 0, first, memory)
        write_to_shared_memory(space, 1, second, memory)
        assert tuple(seen) == (first, second) and len(seen) == 2 and seen[1] == second
        frozen = copy.deepcopy(seen)  # what the vector env hands out (copy=True)
        assert type(frozen) is tuple and frozen == (first, second)


# --- vector envs -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gym_browser(shared_browser):
    """``gymnasium.make`` envs of this process share the session's Chromium (a forked worker
    launches its own)."""
    before = registration._BROWSER
    registration._BROWSER = shared_browser
    yield shared_browser
    registration._BROWSER = before
    WEBAPPS.close()


@pytest.mark.browser
def test_a_forked_child_forgets_the_parents_server_and_browser(gym_browser):

    parent_server, _ = shared_server()
    assert registration.shared_browser() is gym_browser
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        try:
            inherited = (parent_server.running, registration._BROWSER is None,
                         getattr(browser_support._local, "driver", None) is None)
            server, client = shared_server()
            sid = client.create({})
            with urlopen(f"{server.url}/api/sessions/{sid}", timeout=10) as reply:  # its own server has it
                status = reply.status
            report = [*inherited, server is not parent_server, urlsplit(server.url).port, status]
            stop_shared_server()  # stops the child's server; returns
        except BaseException as e:  # noqa: BLE001 (reported to the parent)
            report = [repr(e)]
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end) as f:
            report = json.loads(f.read())
    finally:
        os.waitpid(pid, 0)
    assert report[:4] == [False, True, True, True], report
    assert report[4] != urlsplit(parent_server.url).port and report[5] == 200, report
    # the parent's server and browser go on
    assert parent_server.running and shared_server()[0] is parent_server
    with urlopen(f"{parent_server.url}/api/health", timeout=10) as reply:
        assert reply.status == 200
    assert gym_browser.connected and registration.shared_browser() is gym_browser


def _process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every process."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), fields[0], cmd)
    return table


def _descendants(roots: set[int]) -> dict[int, str]:
    """pid -> command line of every live process below ``roots``."""
    table = _process_table()
    found: dict[int, str] = {}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, state, cmd) in table.items():
            if pid not in found and (ppid in roots or ppid in found) and state != "Z":
                found[pid] = cmd
                grew = True
    return found


def _still_running(procs: dict[int, str]) -> dict[int, str]:
    table = _process_table()
    return {pid: cmd for pid, cmd in procs.items()
            if pid in table and table[pid][1] != "Z" and table[pid][2] == cmd}


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _oracle_actions(venv) -> tuple[str, ...]:
    return tuple(json.dumps(action_to_dict(a)) for a in venv.call("oracle_action"))


def _run_vector_env(env_id: str, *, vector_kwargs: dict | None = None, **env_kwargs) -> None:
    """An async vector env of 2 workers: reset, an oracle episode to reward 1 in each, autoreset,
    random actions, close; then no process the workers started is left, nor their app servers."""
    venv = gymnasium.make_vec(env_id, num_envs=2, vectorization_mode="async", vector_kwargs=vector_kwargs or {},
                              **env_kwargs)
    closed = False
    try:
        workers = {p.pid for p in venv.processes}
        venv.reset_async(seed=0)
        obs, _ = venv.reset_wait(timeout=120)  # a worker on the parent's copies never answered
        assert obs in venv.observation_space
        assert all(goal.startswith("Open the ") for goal in obs["goal"]), obs["goal"]
        assert all("\n" in tree for tree in obs["tree"])
        single = {key: value[0] for key, value in obs.items()}
        flat = space_utils.flatten(venv.single_observation_space, single)
        assert space_utils.unflatten(venv.single_observation_space, flat)["tree"] == single["tree"]
        # each worker has its own app server, not the parent's
        ports = {urlsplit(url).port for url in obs["url"]}
        assert len(ports) == 2 and urlsplit(shared_server()[0].url).port not in ports, obs["url"]
        started = _descendants(workers)
        assert sum("chrom" in cmd for cmd in started.values()) >= 2, started  # a Chromium each

        rewards, done = np.zeros(2), np.zeros(2, bool)
        for _ in range(6):
            venv.step_async(_oracle_actions(venv))
            obs, reward, term, trunc, _ = venv.step_wait(timeout=60)
            assert not trunc.any()
            rewards += reward
            done |= term
            if done.all():
                break
        assert done.all() and rewards.tolist() == [1.0, 1.0], (rewards, obs["last_action_error"])
        # next-step autoreset: the next step starts new episodes; then random (valid) actions
        venv.step_async(venv.action_space.sample())
        obs, reward, term, trunc, _ = venv.step_wait(timeout=60)
        assert reward.tolist() == [0.0, 0.0] and not term.any() and not trunc.any()
        assert all(goal.startswith("Open the ") for goal in obs["goal"])
        venv.step_async(venv.action_space.sample())
        obs, *_ = venv.step_wait(timeout=60)
        assert obs in venv.observation_space
        venv.close()
        closed = True
        deadline = time.monotonic() + 15
        while (_still_running(started) or any(map(_port_open, ports))) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _still_running(started), _still_running(started)
        assert not any(map(_port_open, ports)), ports
    finally:
        if not closed:
            venv.close(terminate=True)


@pytest.mark.browser
def test_async_vector_env_with_defaults(gym_browser):
    # the defaults: the fork context, observations through shared memory, one browser per worker process
    _run_vector_env("guiagent/webapps.open_app")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("vector_kwargs, env_kwargs", [
    ({"shared_memory": False}, {"share_browser": False}),
    ({"context": "spawn"}, {}),
    ({"context": "forkserver"}, {}),
], ids=["fork-pipes-a-browser-per-env", "spawn", "forkserver"])
def test_async_vector_env_in_every_context(gym_browser, vector_kwargs, env_kwargs):
    _run_vector_env("guiagent/webapps.open_app", vector_kwargs=vector_kwargs, **env_kwargs)


# --- determinism flags -------------------------------------------------------------------------------

#: checked by default; the rest of NONDETERMINISTIC with -m slow
NONDETERMINISTIC_DEFAULT = ["chase-circle", "click-dialog"]


def test_tasks_that_cannot_reset_deterministically_are_registered_so():
    assert {"chase-circle", "moving-items", "stock-market", "click-dialog", "click-dialog-2"} <= NONDETERMINISTIC
    for task_id in MINIWOB.task_ids():
        assert gymnasium.spec(f"guiagent/miniwob.{task_id}").nondeterministic == (task_id in NONDETERMINISTIC)
    assert not any(gymnasium.spec(i).nondeterministic for i in WEBAPPS.env_ids())


def _check_env_passes(env_id: str) -> None:
    with checked_env(env_id):
        pass


@pytest.mark.browser
@pytest.mark.parametrize("task_id", NONDETERMINISTIC_DEFAULT)
def test_check_env_passes_on_nondeterministic_pages(gym_browser, task_id):
    _check_env_passes(f"guiagent/miniwob.{task_id}")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(NONDETERMINISTIC - set(NONDETERMINISTIC_DEFAULT)))
def test_check_env_passes_on_every_nondeterministic_page(gym_browser, task_id):
    _check_env_passes(f"guiagent/miniwob.{task_id}")


# --- rendering ---------------------------------------------------------------------------------------

def test_render_metadata():
    assert GuiEnv.metadata["render_modes"] == ["rgb_array"] and GuiEnv.metadata["render_fps"] > 0
    assert registration.make_gym_env.metadata["render_modes"] == ["rgb_array", "human"]


@pytest.mark.browser
def test_rgb_array_list_collects_every_frame(gym_browser):
    env = gymnasium.make("guiagent/miniwob.click-button", render_mode="rgb_array_list")
    try:
        assert isinstance(env, gymnasium.wrappers.RenderCollection) and env.render_mode == "rgb_array_list"
        obs, _ = env.reset(seed=0)
        obs, *_ = env.step('{"kind": "wait", "seconds": 0}')
        frames = env.render()
        assert len(frames) == 2 and np.array_equal(frames[-1], obs["screenshot"])
    finally:
        env.close()


def test_human_rendering_without_a_display_says_so(monkeypatch):
    pytest.importorskip("pygame")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(registration, "shared_browser", lambda: pytest.fail("a browser was started"))
    with pytest.raises(RuntimeError, match="no display"):
        gymnasium.make("guiagent/miniwob.click-button", render_mode="human")


@pytest.mark.browser
def test_human_rendering_shows_each_frame(gym_browser, monkeypatch):
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "offscreen")  # a window drawn nowhere: this machine has no display
    env = gymnasium.make("guiagent/miniwob.click-button", render_mode="human")
    try:
        assert env.render_mode == "human" and env.metadata["render_fps"] == GuiEnv.metadata["render_fps"]
        assert isinstance(env.unwrapped, GuiEnv) and env.unwrapped.render_mode == "rgb_array"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            obs, _ = env.reset(seed=0)
            env.step('{"kind": "wait", "seconds": 0}')
            assert env.render() is None
        assert not [str(w.message) for w in caught]
        human = env
        while not isinstance(human, gymnasium.wrappers.HumanRendering):
            human = human.env
        assert human.window is not None and human.screen_size == obs["screenshot"].shape[1::-1]
    finally:
        env.close()
