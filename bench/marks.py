"""What numbering a page's elements costs an observation: ``observe()`` with marks off and on.

Run::

    python bench/marks.py                 # 40 observations per page and setting
    python bench/marks.py --rounds 100
    python bench/marks.py --oracles 3     # every oracle through element actions, 3 seeds a task
    python bench/marks.py --taps 200      # where an element action taps: the cover check against the centre
    python bench/marks.py --android-taps 200   # the same on Android UI dumps (the drawing-order rule)

Two devices on one Chromium, one with ``BrowserConfig.marks`` off and one with it on (ARIA tree
text on in both, as the suites' default), look at the same pages in turn: the webapps launcher,
its Settings screen and its contacts list (a long scrolled list), and the MiniWoB ``click-widget``
page. Observations alternate off/on so both see the same machine load. Reported per page: the
median ``observe()`` wall time of each and the difference, the number of marks, and the CPU time of
:func:`emulators.browser_support.build_marks` alone (parsing the two CDP replies). The last
stdout line is one JSON object.

``--oracles N`` instead runs every webapps and MiniWoB oracle for N seeds with marks on, each tap
turned into the element action on the mark it lands on (``grounding.marks.to_element_action``),
and reports the success per task: how far the marks cover what a solver needs to touch.

``--taps N`` measures what finding an element action's point costs (``BrowserDevice._resolve``, N calls
each, alternating): the box centre alone (``guiagent.types.resolve_element``, what devices did before)
against the check that nothing covers the centre, on a mark nothing covers (the webapps launcher's
first app: the one-call look) and on a covered one (MiniWoB++ ``click-test-2`` seed 1000015, whose
button ONE lies under TWO at its centre: the search of the box), beside one ``observe()`` for scale.
The load average is printed with the figures.

``--android-taps N`` times the Android side, which has no page to ask: the marks of a UI dump alone
(``emulators.android.uitree.ui_marks``) against the marks with the tap points of covered ones
(``ui_marks_and_taps``, the drawing-order rule), N calls each, alternating, on the checked-in
settings dump (nothing covered) and on a generated list of 200 rows under a floating button (one
row covered), beside the parse of the dump.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulators.browser_support import build_marks  # noqa: E402
from emulators.suites import get_suite  # noqa: E402
from emulators.suites.registration import shared_browser  # noqa: E402


def _median_ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1e3, 2)


def oracles(seeds: int) -> None:
    from grounding.marks import to_element_action

    out: dict[str, float] = {}
    for suite_name in ("webapps", "miniwob"):
        suite = get_suite(suite_name)
        ids = suite.oracle_task_ids() if suite_name == "miniwob" else suite.task_ids()
        for task in ids:
            env = suite.make_env(task, device=suite.make_device(browser=shared_browser(), marks=True))
            wins = 0
            for seed in range(seeds):
                _, info = env.reset(seed=seed)
                obs, reward = info["observation"], 0.0
                for _ in range(env.max_steps):
                    _, reward, term, trunc, info = env.step(to_element_action(env.oracle_action(), obs.marks))
                    obs = info["observation"]
                    if term or trunc:
                        break
                wins += reward == 1.0
            env.close()
            out[f"{suite_name}.{task}"] = wins / seeds
            print(f"{suite_name}.{task:36s} {wins}/{seeds}", flush=True)
        suite.close()
    solved = sum(v == 1.0 for v in out.values())
    print(json.dumps({"bench": "marks_oracles", "seeds": seeds, "tasks": len(out), "all_seeds_solved": solved,
                      "not_all": {k: v for k, v in out.items() if v < 1.0}}))


def taps(rounds: int) -> None:
    from guiagent.types import ClickElement, resolve_element

    browser = shared_browser()
    web, wob = get_suite("webapps"), get_suite("miniwob")
    launcher = web.make_env("open_app", device=web.make_device(browser=browser, marks=True))
    launcher.reset_typed(seed=0)
    buttons = wob.make_env("click-test-2", device=wob.make_device(browser=browser, marks=True))
    buttons.reset_typed(seed=1000015)
    cases = {}
    for label, env, pick in (("uncovered (launcher app)", launcher, lambda ms: next(m for m in ms if m.role == "link")),
                             ("covered (click-test-2 ONE)", buttons, lambda ms: next(m for m in ms if m.name == "ONE"))):
        dev = env.device
        obs = dev.observe()
        mark = pick(obs.marks)
        act = ClickElement(mark.id)
        centre, checked, look = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            resolve_element(act, dev._marks)
            centre.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            point = dev._resolve(act)
            checked.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            dev.observe()
            look.append(time.perf_counter() - t0)
        moved = (round(point.x, 4), round(point.y, 4)) != tuple(round(v, 4) for v in mark.center)
        cases[label] = {"centre_ms": _median_ms(centre), "checked_ms": _median_ms(checked),
                        "observe_ms": _median_ms(look), "tap_moved_off_centre": moved}
        print(f"{label:28s} centre {cases[label]['centre_ms']:6.3f} ms, checked {cases[label]['checked_ms']:6.2f} ms "
              f"(tap moved off the centre: {moved}); one observe() {cases[label]['observe_ms']:6.1f} ms; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    launcher.close()
    buttons.close()
    web.close()
    wob.close()
    print(json.dumps({"bench": "marks_taps", "rounds": rounds, "cases": cases, "load_1min": os.getloadavg()[0]}))


def android_taps(rounds: int) -> None:
    from pathlib import Path

    from emulators.android.uitree import parse_ui_tree, ui_marks, ui_marks_and_taps

    here = Path(__file__).resolve().parent.parent / "tests" / "emulators" / "android" / "fixtures"
    rows = "".join(f'<node class="android.widget.LinearLayout" clickable="true" bounds="[0,{100 * i}][1080,{100 * i + 100}]">'
                   f'<node class="android.widget.TextView" text="Row {i}" bounds="[40,{100 * i}][800,{100 * i + 100}]"/></node>'
                   for i in range(200))
    fab = ('<hierarchy><node class="android.widget.FrameLayout" bounds="[0,0][1080,20000]">' + rows +
           '<node class="android.widget.ImageButton" content-desc="New" clickable="true" bounds="[400,1000][700,1200]"/>'
           '</node></hierarchy>')
    cases = {}
    for label, xml, size in (("settings dump", (here / "settings_home.xml").read_bytes(), (1080, 2400)),
                             ("200 rows, a floating button", fab.encode(), (1080, 20000))):
        parse, plain, taps_ = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            nodes = parse_ui_tree(xml)
            parse.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ui_marks(nodes, size)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            marks, points = ui_marks_and_taps(nodes, size)
            taps_.append(time.perf_counter() - t0)
        cases[label] = {"nodes": len(nodes), "marks": len(marks), "covered": len(points), "parse_ms": _median_ms(parse),
                        "marks_ms": _median_ms(plain), "marks_and_taps_ms": _median_ms(taps_)}
        c = cases[label]
        print(f"{label:28s} {c['nodes']} nodes, {c['marks']} marks, {c['covered']} covered: parse {c['parse_ms']:.2f} ms, "
              f"marks {c['marks_ms']:.2f} ms, marks and taps {c['marks_and_taps_ms']:.2f} ms; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(json.dumps({"bench": "android_taps", "rounds": rounds, "cases": cases, "load_1min": os.getloadavg()[0]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40, help="observations per page and setting")
    ap.add_argument("--oracles", type=int, default=0, metavar="N",
                    help="run every oracle through element actions for N seeds instead")
    ap.add_argument("--taps", type=int, default=0, metavar="N",
                    help="time N element-action points with and without the cover check instead")
    ap.add_argument("--android-taps", type=int, default=0, metavar="N",
                    help="time N Android dumps' marks with and without the tap points of covered marks instead")
    args = ap.parse_args()
    if args.android_taps:
        android_taps(args.android_taps)
        return
    if args.taps:
        taps(args.taps)
        return
    if args.oracles:
        oracles(args.oracles)
        return
    browser = shared_browser()
    web, wob = get_suite("webapps"), get_suite("miniwob")
    pages = {
        "webapps launcher": ("webapps", "open_app", None),
        "webapps settings": ("webapps", "settings_turn_on", None),
        "webapps contacts list": ("webapps", "contacts_delete", "contacts"),
        "miniwob click-widget": ("miniwob", "click-widget", None),
    }
    out: dict[str, dict[str, float]] = {}
    for label, (suite_name, task, path) in pages.items():
        suite = web if suite_name == "webapps" else wob
        envs = [suite.make_env(task, device=suite.make_device(browser=browser, marks=m)) for m in (False, True)]
        for env in envs:
            env.reset(seed=3)
            if path is not None:  # open the page the label names in this episode's session
                env.device.goto(env.device.home_url + path)
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for k, env in enumerate(envs):
                t0 = time.perf_counter()
                obs = env.device.observe()
                times[k].append(time.perf_counter() - t0)
        dev = envs[1].device
        cdp = dev._cdp
        ax = cdp.send("Accessibility.getFullAXTree")
        snap = cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
        t0 = time.process_time()
        for _ in range(args.rounds):
            marks = build_marks(ax["nodes"], snap, dev.config.viewport)
        parse_ms = (time.process_time() - t0) / args.rounds * 1e3
        off, on = _median_ms(times[0]), _median_ms(times[1])
        out[label] = {"observe_ms_off": off, "observe_ms_on": on, "extra_ms": round(on - off, 2),
                      "marks": len(marks), "build_marks_cpu_ms": round(parse_ms, 3), "ax_nodes": len(ax["nodes"])}
        assert obs.marks is not None and len(obs.marks) == len(marks)
        print(f"{label:24s} observe {off:6.1f} ms off, {on:6.1f} ms on (+{on - off:5.1f}); "
              f"{len(marks):3d} marks from {len(ax['nodes'])} AX nodes; build_marks {parse_ms:.2f} ms CPU",
              flush=True)
        for env in envs:
            env.close()
    web.close()
    browser.close()
    worst = max(v["extra_ms"] for v in out.values())
    print(json.dumps({"bench": "marks", "rounds": args.rounds, "pages": out, "worst_extra_ms": worst}))


if __name__ == "__main__":
    main()
