"""CPU per env operation on webapps, split by process, for the full Chromium and its headless shell.

    python bench/env_cpu.py                  # 30 repeats of each operation, both browsers
    python bench/env_cpu.py --repeats 60 --browsers shell

Wall time on a shared 2-core machine says more about the other jobs than about the env;
CPU time, summed over every process the env runs (this Python process, the Playwright
driver, Chromium's browser, renderer, GPU and utility processes, read from
``/proc/<pid>/stat`` before and after ``--repeats`` calls), says what each operation
costs. One phone device of the webapps suite (the settings screen) per browser; for each
operation the CPU milliseconds a call, by process, and the wall milliseconds a call:

* ``tap + settle + observe``: a tap on an empty spot, the settle, screenshot + ARIA tree
  (an env step that changes nothing: the tree is reused, ``BrowserConfig.tree_cache``), and
  the same on a device that reads the tree at every observation;
* ``observe``, ``screenshot``, ``aria tree``: the observation (with and without the tree cache)
  and its two parts;
* ``page load``: ``goto`` + settle + observe, what a tap on a link costs;
* ``reset (page load)`` / ``reset (in page)``: a whole webapps episode reset (session
  state, start page, first observation) loading the start page, and rendering it in the
  open document (``BrowserDevice.reset_in_page``);
* the same page load and observe with ``tree="none"``;
* ``settle script, page.evaluate`` / ``settle script, CDP``: the settle's script on a quiet page,
  one call, through Playwright's ``page.evaluate`` and through the path the device runs its own
  scripts on (``BrowserDevice._js``, CDP ``Runtime.evaluate``);
* ``task checks, a copy each`` / ``after a change`` / ``no change``: a step's two state checks
  (``evaluate`` and ``milestones``) each reading its own copy of the session's state, sharing one
  fresh copy (the session changed since the last checks), and reusing the last one (it did not).

Browsers (``--browsers``): ``full`` is the Chromium that ``find_chromium()`` gives a
headed launch, ``shell`` Chromium's headless shell (``chromium-headless-shell``, what
headless envs launch when it is installed); a browser that is not installed is skipped.
Operations alternate between the browsers. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.cpu import load_avg  # noqa: E402
from bench.cpu import measure as _measure  # noqa: E402
from emulators.base import GuiEnv  # noqa: E402
from emulators.browser_support import _HEADLESS_SHELLS, SETTLE_POLL_JS, find_chromium, launch  # noqa: E402
from emulators.suites.webapps import SUITE, TASKS  # noqa: E402
from guiagent.types import Click  # noqa: E402

def measure(fn: Callable[[], object], repeats: int) -> dict:
    return _measure(fn, repeats, with_load=False)


class Rig:
    """One browser with a webapps device on a settings screen (and one without the ARIA tree)."""

    def __init__(self, executable: str):
        self.handle = launch(executable)
        self.device = SUITE.make_device(browser=self.handle)
        self.no_tree = SUITE.make_device(browser=self.handle, tree="none")
        self.no_cache = SUITE.make_device(browser=self.handle, tree_cache=False)
        self.env = GuiEnv(self.device, TASKS["settings_turn_on"])
        self.env.reset_typed(seed=0)
        self.url = self.device.page.url
        GuiEnv(self.no_tree, TASKS["settings_turn_on"]).reset_typed(seed=0)
        GuiEnv(self.no_cache, TASKS["settings_turn_on"]).reset_typed(seed=0)
        self.url_no_tree = self.no_tree.page.url

    def operations(self) -> dict[str, Callable[[], object]]:
        dev, env = self.device, self.env

        def checks(share: bool, fresh: bool = False) -> None:
            task = env.task  # the episode's task: a reset makes another
            if not share:
                task.success(task.state(), None)
                task.progress(task.state())
                return
            if fresh:
                task._checked = None
            task.evaluate(dev)
            task.milestones(dev)

        def reset(in_page: bool) -> None:
            object.__setattr__(dev.config, "in_page_reset", in_page)
            env.reset_typed(seed=1)

        return {
            "tap + settle + observe": lambda: (dev.execute(Click(0.5, 0.95)), dev.observe()),
            "the same, no tree cache": lambda: (self.no_cache.execute(Click(0.5, 0.95)), self.no_cache.observe()),
            "observe": dev.observe,
            "observe, no tree cache": self.no_cache.observe,
            "screenshot": lambda: dev._capture(True, {"format": "png", "optimizeForSpeed": True}, False),
            "aria tree": lambda: dev.page.locator("body").aria_snapshot(),
            "page load": lambda: (dev.goto(self.url), dev.observe()),
            "reset (page load)": lambda: reset(False),
            "reset (in page)": lambda: reset(True),
            "page load, no tree": lambda: (self.no_tree.goto(self.url_no_tree), self.no_tree.observe()),
            "observe, no tree": self.no_tree.observe,
            # the settle's script on a quiet page, one call: through Playwright's page.evaluate, and
            # through the device's own path for its scripts (BrowserDevice._js: CDP Runtime.evaluate)
            "settle script, page.evaluate": lambda: dev.page.evaluate(SETTLE_POLL_JS, 1000),
            "settle script, CDP": lambda: dev._js(SETTLE_POLL_JS, 1000),
            # a step's task checks (evaluate + milestones) reading the state afresh each, as before
            # they shared one copy; the same checks after a change on the server (one copy, shared);
            # and on a session that did not change (the copy the last checks took)
            "task checks, a copy each": lambda: checks(False),
            "task checks, after a change": lambda: checks(True, fresh=True),
            "task checks, no change": lambda: checks(True),
        }

    def close(self) -> None:
        self.env.task.teardown(self.device)
        self.device.close()
        self.no_tree.close()
        self.no_cache.close()
        self.handle.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--browsers", nargs="+", default=["full", "shell"], choices=["full", "shell"])
    args = ap.parse_args()
    if args.repeats <= 0:
        ap.error("--repeats must be positive")

    found = {"full": find_chromium(), "shell": next((p for p in _HEADLESS_SHELLS if os.access(p, os.X_OK)), None)}
    rigs: dict[str, Rig] = {}
    for name in args.browsers:
        if found[name] is None:
            print(f"{name}: not installed, skipped", flush=True)
            continue
        rigs[name] = Rig(found[name])
    print(f"browsers: {', '.join(f'{n} {found[n]}' for n in rigs)}; {args.repeats} calls an operation; "
          f"load {load_avg()}", flush=True)
    results: dict[str, dict[str, dict]] = {n: {} for n in rigs}
    try:
        names = list(next(iter(rigs.values())).operations()) if rigs else []
        for rig in rigs.values():  # a first pass unmeasured: the first calls pay the browser's warm-up
            for fn in rig.operations().values():
                fn()
        for op in names:
            for name, rig in rigs.items():
                r = measure(rig.operations()[op], args.repeats)
                r["load_avg"] = load_avg()
                results[name][op] = r
                parts = " ".join(f"{k} {v}" for k, v in r["by_process"].items())
                print(f"{name:<6} {op:<30} {r['cpu_ms']:6.1f} ms CPU ({parts}), {r['wall_ms']:6.1f} ms wall  "
                      f"load {r['load_avg']}", flush=True)
    finally:
        for rig in rigs.values():
            rig.close()
        SUITE.close()
    print(json.dumps({"bench": "env_cpu", "repeats": args.repeats, "executables": {n: found[n] for n in rigs},
                      "results": results}))


if __name__ == "__main__":
    main()
