"""CPU time of a process tree by kind of process, from ``/proc`` (stdlib only: bench scripts
import it, and ``bench/rollout_ab.py`` loads it into runs of other code trees)."""

from __future__ import annotations

import os
import re
import time

TICK = os.sysconf("SC_CLK_TCK")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _kind(cmdline: bytes) -> str:
    """Which process of the env this is, from its command line."""
    if b"playwright" in cmdline and b"node" in cmdline.split(b" ")[0]:
        return "driver"
    if b"python" in cmdline.split(b" ")[0] or cmdline.startswith(b"ray::"):
        return "python"
    if b"chrom" not in cmdline.split(b" ")[0]:
        return "other"  # Ray's raylet and GCS server, shells
    m = re.search(rb"--type=([a-z-]+)", cmdline)
    if not m:
        return "browser"
    kind = m.group(1).decode()
    return {"renderer": "renderer", "gpu-process": "gpu"}.get(kind, "utility")


def cpu_by_process(root: int) -> dict[str, float]:
    """CPU seconds used so far by ``root`` and its descendants (children they reaped included), by kind."""
    stats: dict[int, tuple[int, float, bytes]] = {}
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            with open(f"/proc/{e.name}/stat") as f:
                st = f.read()
            with open(f"/proc/{e.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        stats[int(e.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK, cmd)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            kind = _kind(stats[pid][2])
            out[kind] = out.get(kind, 0.0) + stats[pid][1]
        todo += children.get(pid, [])
    return out


def measure(fn, repeats: int, *, with_load: bool = False) -> dict:
    """``fn`` once to warm up, then ``repeats`` times: CPU ms a call summed over this process tree
    (by process kind), wall ms a call, and the load average when ``with_load``."""
    fn()  # warm
    before, t0 = cpu_by_process(os.getpid()), time.perf_counter()
    for _ in range(repeats):
        fn()
    wall = (time.perf_counter() - t0) / repeats
    after = cpu_by_process(os.getpid())
    by = {k: round(1e3 * (after.get(k, 0) - before.get(k, 0)) / repeats, 1) for k in sorted(set(after) | set(before))}
    by = {k: v for k, v in by.items() if v}
    out = {"cpu_ms": round(sum(by.values()), 1), "wall_ms": round(1e3 * wall, 1), "by_process": by}
    if with_load:
        out["load_avg"] = load_avg()
    return out
