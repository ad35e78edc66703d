"""Step latency of the browser env against a raw Playwright loop, side by side.

Run::

    python bench/env_step.py            # 60 steps per size
    python bench/env_step.py --steps 200

One Chromium, two contexts on the same local page (served on 127.0.0.1 by a real
HTTP server started here) and the same viewport: the *raw* loop does
``mouse.click`` (``touchscreen.tap`` on the phone) + ``page.screenshot()``; the *env*
step is :meth:`GuiEnv.step_typed` with a :class:`BrowserDevice`: the action, settling,
the observation (screenshot + ARIA tree + url) and the task's done/reward check.
Steps alternate raw/env so both see the same machine load. Sizes: 1280x720 desktop
and a 360x640 phone. The last stdout line is one JSON object; ``ratio_vs_raw`` is
the worse of the two sizes' median ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulators.base import Device, GuiEnv, Task  # noqa: E402
from emulators.browser import MOBILE_USER_AGENT, BrowserConfig, BrowserDevice, launch_browser  # noqa: E402
from guiagent.types import Click  # noqa: E402

#: a small app-like page: a header, a list, a counter button that re-renders a line
PAGE = """<!doctype html><html><head><meta name="viewport" content="width=device-width,initial-scale=1">
<title>bench</title><style>body{font:16px sans-serif;margin:0}header{background:#246;color:#fff;padding:12px}
li{padding:8px;border-bottom:1px solid #ddd}#btn{position:fixed;left:20px;top:60px;width:200px;height:48px}
ul{margin-top:120px}</style></head><body><header>Bench app</header>
<button id="btn" onclick="document.getElementById('count').textContent = ++window.n">Add one</button>
<p id="count" style="position:fixed;left:240px;top:60px">0</p>
<ul>""" + "".join(f"<li>Item {i}: lorem ipsum dolor sit amet</li>" for i in range(40)) + """</ul>
<script>window.n = 0;</script></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve_page() -> tuple[ThreadingHTTPServer, str]:
    """Start the bench page server on 127.0.0.1; returns (server, url)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class CounterTask(Task):
    """Press the button a billion times: never done, so every step runs the done check."""

    suite = "bench"
    task_id = "counter"
    template = "Press the button."
    max_steps = 10**9

    @classmethod
    def sample_params(cls, rng: random.Random) -> dict:
        return {}

    def setup(self, device: Device) -> str:
        return self.goal

    def is_done(self, device: Device) -> bool:
        return device.evaluate("() => window.n >= 1e9")  # type: ignore[attr-defined]

    def evaluate(self, device: Device, answer: str | None = None) -> float:
        return float(device.evaluate("() => window.n >= 1e9"))  # type: ignore[attr-defined]

    def oracle(self, device: Device):
        return Click(*device.center("#btn"))  # type: ignore[attr-defined]


def measure(handle, url: str, config: BrowserConfig, steps: int) -> dict:
    """Median ms of raw click+screenshot and of env.step, interleaved."""
    w, h = config.viewport
    options = {"viewport": {"width": w, "height": h}, "device_scale_factor": config.device_scale_factor,
               "is_mobile": config.mobile, "has_touch": config.mobile}
    if config.mobile:
        options["user_agent"] = MOBILE_USER_AGENT
    ctx = handle.browser.new_context(**options)
    page = ctx.new_page()
    page.goto(url)
    device = BrowserDevice(config, browser=handle)
    env = GuiEnv(device, CounterTask)
    env.reset_typed(seed=0)
    cx, cy = device.center("#btn")
    bx, by = cx * w, cy * h
    raw, ours, tree_chars = [], [], 0
    for i in range(steps + 5):
        t0 = time.perf_counter()
        page.touchscreen.tap(bx, by) if config.mobile else page.mouse.click(bx, by)
        shot = page.screenshot()
        t1 = time.perf_counter()
        obs, *_ = env.step_typed(Click(cx, cy))
        t2 = time.perf_counter()
        if i >= 5:  # warm-up
            raw.append((t1 - t0) * 1e3)
            ours.append((t2 - t1) * 1e3)
        tree_chars = len(obs.tree or "")
    assert shot and obs.screenshot and device.evaluate("() => window.n") == steps + 5
    env.close()
    ctx.close()
    raw_ms, env_ms = statistics.median(raw), statistics.median(ours)
    return {"viewport": [w, h], "mobile": config.mobile, "raw_ms": round(raw_ms, 1),
            "env_ms": round(env_ms, 1), "ratio_vs_raw": round(env_ms / raw_ms, 3),
            "env_p90_ms": round(sorted(ours)[int(0.9 * len(ours))], 1), "tree_chars": tree_chars}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    server, url = serve_page()
    handle = launch_browser()
    results = {}
    try:
        for name, cfg in (("desktop", BrowserConfig.desktop(home_url=url)),
                          ("phone", BrowserConfig.phone(home_url=url))):
            r = measure(handle, url, cfg, args.steps)
            results[name] = r
            print(f"{name:8s} {r['viewport'][0]}x{r['viewport'][1]}: raw click+screenshot {r['raw_ms']} ms, "
                  f"env step {r['env_ms']} ms (p90 {r['env_p90_ms']}), ratio {r['ratio_vs_raw']}")
    finally:
        handle.close()
        server.shutdown()
    load = os.getloadavg()[0]
    print(f"load average (1 min) during the run: {load:.1f} on {os.cpu_count()} cores")
    print(json.dumps({"bench": "env_step", "steps": args.steps, **results, "load_avg_1m": round(load, 2),
                      "overlapped_capture": BrowserDevice._overlap_ok,
                      "ratio_vs_raw": max(r["ratio_vs_raw"] for r in results.values())}))


if __name__ == "__main__":
    main()
