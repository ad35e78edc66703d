"""guiagent.reaper: what a process started ends with it, even when it is SIGKILLed (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from guiagent.reaper import descendants
from guiagent.store._proc import process_start

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from guiagent.reaper import watch
    watch()
    # a grandchild in a session of its own (as Chromium and Ray's agents are): no signal to the group reaches it
    child = subprocess.Popen(["sh", "-c", "setsid sleep 300 & exec sleep 300"], start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(300)
""")


def test_a_sigkilled_process_takes_what_it_started_along():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    below: dict[int, int] = {}
    try:
        int(parent.stdout.readline())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the child, its sleep and the watchdog are up, and noted (1 s)
            below = descendants(parent.pid)
            if len(below) >= 3:
                break
            time.sleep(0.1)
        time.sleep(1.2)
        below = descendants(parent.pid)
        assert len(below) >= 3, below  # the watchdog, the child and its sleep
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(process_start(p) == s for p, s in below.items()):
            time.sleep(0.1)
        assert [p for p, s in below.items() if process_start(p) == s] == []
    finally:
        for p, start in {**below, **descendants(parent.pid)}.items():
            if process_start(p) == start:
                os.kill(p, signal.SIGKILL)
        parent.kill()
        parent.wait(10)
