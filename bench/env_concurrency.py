"""Throughput of several browser envs at once, and memory per env.

Run::

    python bench/env_concurrency.py                 # 1, 2, 4, 8 envs, 6 s each
    python bench/env_concurrency.py --envs 1 2 4 --seconds 10

Model: one thread per env, each driving its own ``GuiEnv`` (a :class:`BrowserDevice`
with its own browser context and page) in a loop of ``env.step_typed(Click)`` on the
local bench page (see ``bench/env_step.py``). The sync Playwright API is bound to
the thread that started it, so each thread runs its own Playwright driver; all of
them attach over CDP to **one** shared Chromium (contexts in one browser beat one
browser per env on 2 cores), which this script launches with a debugging port.
Memory is the PSS of the Chromium process tree (``/proc/<pid>/smaps_rollup``) with
the envs open, minus the idle browser's, divided by the number of envs.
The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from env_step import CounterTask, serve_page  # noqa: E402

from emulators.base import GuiEnv  # noqa: E402
from emulators.browser import BrowserConfig, BrowserDevice  # noqa: E402
from emulators.browser_support import CHROMIUM_ARGS, connect_over_cdp, find_chromium  # noqa: E402
from guiagent.types import Click  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def pss_mb(pid: int) -> float:
    """PSS of ``pid`` and all its descendants, in MB."""
    total = 0
    for p in _children(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total / 1024


def worker(cdp_url: str, url: str, ready: threading.Barrier, go: threading.Event, stop: threading.Event,
           counts: list[int], slot: int, errors: list[str]) -> None:
    handle = None
    try:
        handle = connect_over_cdp(cdp_url)
        env = GuiEnv(BrowserDevice(BrowserConfig.desktop(home_url=url), browser=handle), CounterTask)
        env.reset_typed(seed=0)
        point = env.device.center("#btn")  # type: ignore[attr-defined]
        env.step_typed(Click(*point))  # warm-up
        ready.wait()
        go.wait()
        n = 0
        while not stop.is_set():
            env.step_typed(Click(*point))
            n += 1
        counts[slot] = n
        ready.wait()  # hold the context open while memory is read
        ready.wait()
        env.device.close()
    except Exception as e:  # reported by the main thread
        errors.append(f"env {slot}: {e!r}")
        try:
            ready.abort()
        except Exception:
            pass
    finally:
        if handle is not None:
            handle.close()


def run(n: int, cdp_url: str, url: str, seconds: float, browser_pid: int) -> dict:
    ready = threading.Barrier(n + 1)
    go, stop = threading.Event(), threading.Event()
    counts, errors = [0] * n, []
    threads = [threading.Thread(target=worker, args=(cdp_url, url, ready, go, stop, counts, i, errors))
               for i in range(n)]
    for t in threads:
        t.start()
    try:
        ready.wait(timeout=120)
    except threading.BrokenBarrierError:
        for t in threads:
            t.join(timeout=30)
        raise RuntimeError("; ".join(errors) or "a worker did not start") from None
    t0 = time.perf_counter()
    go.set()
    time.sleep(seconds)
    stop.set()
    ready.wait(timeout=60)
    elapsed = time.perf_counter() - t0
    mem = pss_mb(browser_pid)
    ready.wait(timeout=60)
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    total = sum(counts)
    return {"envs": n, "steps": total, "steps_per_s": round(total / elapsed, 1),
            "ms_per_step_per_env": round(1000 * elapsed * n / max(total, 1), 1), "pss_mb": round(mem, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    server, url = serve_page()
    port = _free_port()
    exe = find_chromium() or "chromium"
    proc = subprocess.Popen([exe, "--headless", *CHROMIUM_ARGS, f"--remote-debugging-port={port}",
                             "--user-data-dir=/tmp/guiagent-bench-profile", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cdp_url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        idle = pss_mb(proc.pid)
        print(f"idle browser PSS {idle:.0f} MB")
        rows = []
        for n in args.envs:
            r = run(n, cdp_url, url, args.seconds, proc.pid)
            r["pss_per_env_mb"] = round((r["pss_mb"] - idle) / n, 1)
            rows.append(r)
            print(f"{n} envs: {r['steps_per_s']} steps/s, {r['ms_per_step_per_env']} ms/step per env, "
                  f"browser PSS {r['pss_mb']:.0f} MB ({r['pss_per_env_mb']} MB per env)")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.shutdown()
    load = os.getloadavg()[0]
    print(f"load average (1 min): {load:.1f} on {os.cpu_count()} cores")
    print(json.dumps({"bench": "env_concurrency", "mode": "thread per env, one Chromium over CDP",
                      "idle_browser_pss_mb": round(idle, 1), "runs": rows, "load_avg_1m": round(load, 2),
                      "best_steps_per_s": max(r["steps_per_s"] for r in rows)}))


if __name__ == "__main__":
    main()
