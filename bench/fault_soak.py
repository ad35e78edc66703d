"""Fault-injection soak of a training run: browsers killed, the trainer SIGKILLed and resumed, the disk filled
and freed, at random (seeded) times; at the end the run's store must be whole, no episode scored from an
infrastructure fault, and no checkpointed iteration missing.

    nice -n 5 python bench/fault_soak.py --minutes 30            # the figures of docs/results.md
    python bench/fault_soak.py --minutes 4 --fault-every 30      # a quick look (the slow test runs this)

A tiny model trains (`guiagent train`, GRPO on two webapps tasks, real Chromium) in a run folder on a tmpfs
of ``--disk-mb`` (mounting one needs root; without it the disk faults are left out and said so). Faults come
at exponential intervals of mean ``--fault-every`` seconds, drawn from ``--seed``, in turn among the kinds
``--faults`` names:

* ``browser``: one of the run's Chromium processes is SIGKILLed (its episodes must end `aborted`);
* ``trainer``: the trainer is SIGKILLed; the soak waits for what it started to end (its watchdog's work,
  timed) and resumes it with ``guiagent train --resume`` (its stale run-folder lock taken over);
* ``disk``: the tmpfs is filled to the last byte for ``--full-for`` seconds, then freed; a trainer that met
  the full disk must have exited 1 with one line naming what it was writing, and is resumed.

Any other end of the trainer (a traceback, another exit status, a SIGABRT) is a failure. After ``--minutes``
the trainer is stopped with SIGTERM (exit 143 expected) and the run checked:

* integrity: ``guiagent store check`` when the command exists; SQLite's ``integrity_check`` and
  ``foreign_key_check``, and every screenshot a step names present with the sha256 its name says;
* no episode in progress; every aborted episode unscored (success 0, a reason, no step credit); no completed
  episode holding a dead device's stand-in frame (1x1);
* no checkpoint step missing: the checkpoint whole, at iteration N, and the run's metrics at every iteration
  below N.

Printed: one line per fault and per trainer end, then one JSON object (last stdout line): faults injected and
survived by kind, trainer ends by kind, iterations, episodes completed and aborted, the seconds the orphans of
a killed trainer took to end (max), and each check. Exit status 1 when a check or a trainer end failed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from guiagent.reaper import descendants  # noqa: E402
from guiagent.store._proc import process_start  # noqa: E402

FAULTS = ("browser", "trainer", "disk")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seeds the fault times and kinds")
    p.add_argument("--fault-every", type=float, default=60.0, help="mean seconds between two faults")
    p.add_argument("--faults", default=",".join(FAULTS), help="kinds to inject, in turn: browser,trainer,disk")
    p.add_argument("--full-for", type=float, default=8.0, help="seconds the disk stays full")
    p.add_argument("--disk-mb", type=int, default=400, help="size of the tmpfs the run lives on")
    p.add_argument("--model", default="", help="a model folder (default: a tiny model built here)")
    p.add_argument("--out", default="", help="keep the run here at the end (default: not kept)")
    p.add_argument("--pool", default="inprocess", choices=("inprocess", "ray"), help="the trainer's env pool")
    a = p.parse_args(argv)
    kinds = [k for k in a.faults.split(",") if k]
    if not kinds or set(kinds) - set(FAULTS):
        p.error(f"--faults: choose among {', '.join(FAULTS)}")
    a.kinds = kinds
    return a


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path):
        self.args, self.work = args, work
        self.rng = random.Random(args.seed)
        self.disk: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path = work / "trainer.log"
        self.injected = {k: 0 for k in FAULTS}
        self.survived = {k: 0 for k in FAULTS}
        self.ends: dict[str, int] = {}
        self.failures: list[str] = []
        self.orphan_seconds: list[float] = []
        self.seen: dict[int, int] = {}
        self.disk_at = -1e9  # when the disk was last full: a trainer ending soon after met it

    # ---- set-up -----------------------------------------------------------------------------------------

    def mount(self) -> None:
        disk = self.work / "disk"
        disk.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.args.disk_mb}m", "tmpfs", str(disk)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            self.disk = disk
        else:
            print(f"disk faults left out: cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})", flush=True)
            self.args.kinds = [k for k in self.args.kinds if k != "disk"]
        self.run = disk / "run"

    def model(self) -> str:
        if self.args.model:
            return self.args.model
        from guiagent.cli._common import quiet_library_bars
        from guiagent.policy.tiny import TinyModelSpec, build_tiny_model

        quiet_library_bars()
        out = self.work / "tiny"
        build_tiny_model(TinyModelSpec(size="tiny", seed=0), out)
        return str(out)

    # ---- the trainer ------------------------------------------------------------------------------------

    def start(self, first: bool) -> None:
        cmd = [sys.executable, "-m", "guiagent", "train"]
        if first:
            cmd += ["--model", self.model_dir, "--tasks", "go_home", "open_app", "--groups-per-iteration", "1",
                    "--group-size", "2", "--slots", "2", "--max-new-tokens", "8", "--eval-episodes", "0",
                    "--iterations", "100000", "--pool", self.args.pool, "--seed", str(self.args.seed),
                    "--out", str(self.run)]
        else:
            cmd += ["--resume", str(self.run)]  # the run's own total, its stale lock taken over
        with open(self.log_path, "a") as log:
            log.write(f"\n$ {' '.join(cmd)}\n")
            log.flush()
            self.log_at = log.tell()
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def note(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.seen.update(descendants(self.proc.pid))

    def tail(self) -> list[str]:
        with open(self.log_path, errors="replace") as f:
            f.seek(self.log_at)
            return [line.rstrip("\n") for line in f.read().splitlines() if line.strip()]

    def ended(self, why: str) -> None:
        """The trainer ended: judge how (``why``: the fault that ended it, or "" for none), then resume it."""
        rc = self.proc.returncode
        lines = self.tail()
        last = lines[-1] if lines else ""
        if rc == -signal.SIGKILL and why == "trainer":
            kind = "killed"
        elif rc == 1 and last.startswith("guiagent train: no space left on the device while writing ") and (
                " to " in last) and why == "disk":
            kind = "disk full"
        else:
            kind = f"exit {rc}"
            self.failures.append(f"the trainer ended with exit {rc} ({why or 'no fault'}): {last[:300]}")
        if any("Traceback" in line for line in lines):
            self.failures.append(f"a traceback on the trainer's stderr: {' | '.join(lines[-3:])[:300]}")
        self.ends[kind] = self.ends.get(kind, 0) + 1
        print(f"  trainer ended: {kind}", flush=True)
        self.wait_orphans()
        self.start(first=False)

    def wait_orphans(self) -> None:
        t = time.monotonic()
        while any(process_start(p) == s for p, s in self.seen.items()) and time.monotonic() - t < 60:
            time.sleep(0.2)
        left = [p for p, s in self.seen.items() if process_start(p) == s]
        self.orphan_seconds.append(round(time.monotonic() - t, 1))
        if left:
            self.failures.append(f"{len(left)} process(es) of the killed trainer still ran 60 s later")
            for p in left:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
        self.seen = {}

    # ---- faults -----------------------------------------------------------------------------------------

    def browsers(self) -> list[int]:
        below = descendants(self.proc.pid)
        out = []
        for p in below:
            try:
                comm = Path(f"/proc/{p}/comm").read_text().strip()
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
                parent = Path(f"/proc/{ppid}/comm").read_text().strip()
            except (OSError, ValueError, IndexError):
                continue
            if "chrom" in comm and "chrom" not in parent:  # a browser's main process
                out.append(p)
        return out

    def inject(self, kind: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f} s] fault: {kind}", flush=True)
        if kind == "browser":
            found = self.browsers()
            if not found:
                print("  no browser up at this moment: nothing killed", flush=True)
                return
            self.injected[kind] += 1
            os.kill(self.rng.choice(found), signal.SIGKILL)
            self.survived[kind] += 1  # judged at the end: the trainer must not end over it, the checks pass
        elif kind == "trainer":
            self.injected[kind] += 1
            self.note()
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.ended("trainer")
            self.survived[kind] += 1
        elif kind == "disk":
            self.injected[kind] += 1
            filler = self.disk / "filler"
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(bytes(1 << 20))
                    f.flush()
            deadline = time.monotonic() + self.args.full_for
            while time.monotonic() < deadline and self.proc.poll() is None:
                self.note()
                time.sleep(0.2)
            filler.unlink()
            self.disk_at = time.monotonic()
            if self.proc.poll() is not None:
                self.ended("disk")
            self.survived[kind] += 1

    # ---- the soak ---------------------------------------------------------------------------------------

    def soak(self) -> None:
        self.model_dir = self.model()
        self.start(first=True)
        self.t0 = time.monotonic()
        end = self.t0 + 60 * self.args.minutes
        turn = 0
        next_at = self.t0 + self.rng.expovariate(1 / self.args.fault_every)
        while time.monotonic() < end:
            self.note()
            if self.proc.poll() is not None:  # on its own: the full disk just freed, or a failure
                self.ended("disk" if time.monotonic() - self.disk_at < 120 else "")
            if time.monotonic() >= next_at and self.args.kinds:
                self.inject(self.args.kinds[turn % len(self.args.kinds)])
                turn += 1
                next_at = time.monotonic() + self.rng.expovariate(1 / self.args.fault_every)
            time.sleep(0.5)
        self.note()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if rc != 143:
            self.failures.append(f"the trainer stopped by SIGTERM exited {rc}, not 143: {self.tail()[-1:]}")
        self.ends["stopped (SIGTERM)"] = self.ends.get("stopped (SIGTERM)", 0) + 1
        self.wait_orphans()

    # ---- checks -----------------------------------------------------------------------------------------

    def check(self) -> dict:
        from guiagent.store import Store
        from rl.checkpoint import find_checkpoint, read_state

        run = self.run
        checks: dict[str, object] = {}
        Store.open(run).close()  # what a dead writer left in progress is marked aborted, as a resume would
        store_check = subprocess.run([sys.executable, "-m", "guiagent", "store", "check", str(run)],
                                     capture_output=True, text=True)
        if "unknown command 'store'" not in store_check.stderr:
            checks["guiagent store check"] = store_check.returncode == 0
        con = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
        checks["integrity_check"] = con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        checks["foreign_key_check"] = con.execute("PRAGMA foreign_key_check").fetchall() == []
        bad_blobs = 0
        for (h,) in con.execute("SELECT DISTINCT screenshot FROM steps WHERE screenshot IS NOT NULL"):
            found = list((run / "blobs" / h[:2]).glob(f"{h}.*"))
            if not found or hashlib.sha256(found[0].read_bytes()).hexdigest() != h:
                bad_blobs += 1
        checks["blobs whole"] = bad_blobs == 0
        counts = dict(con.execute("SELECT status, count(*) FROM episodes GROUP BY status").fetchall())
        checks["no episode in progress"] = counts.get("in_progress", 0) == 0
        scored = con.execute("SELECT count(*) FROM episodes WHERE status = 'aborted' AND (success != 0 OR "
                             "abort_reason IS NULL OR pk IN (SELECT episode_pk FROM step_credit))").fetchone()[0]
        checks["no aborted episode scored"] = scored == 0
        dead = con.execute("SELECT count(DISTINCT e.pk) FROM episodes e JOIN steps s ON s.episode_pk = e.pk "
                           "WHERE e.status = 'completed' AND s.width = 1 AND s.height = 1").fetchone()[0]
        checks["no completed episode with a dead device's frame"] = dead == 0
        ckpt = find_checkpoint(run)
        iteration = read_state(ckpt)[0].iteration if ckpt is not None else 0
        checks["checkpoint whole"] = ckpt is not None and ckpt.name == "checkpoint"
        logged = {i for (i,) in con.execute("SELECT DISTINCT iteration FROM metrics WHERE name = 'iteration_seconds'")}
        checks["no checkpoint step missing"] = set(range(iteration)) <= logged
        con.close()
        return {"checks": checks, "iterations": iteration, "episodes_completed": counts.get("completed", 0),
                "episodes_aborted": counts.get("aborted", 0), "bad_blobs": bad_blobs,
                "aborted_scored": scored, "completed_with_dead_frames": dead}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.args.out and self.run.exists():
            shutil.copytree(self.run, self.args.out, dirs_exist_ok=True)
            shutil.copy(self.log_path, Path(self.args.out) / "soak-trainer.log")
        if self.disk is not None:
            subprocess.run(["umount", "-l", str(self.disk)], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="fault-soak-") as tmp:
        soak = Soak(args, Path(tmp))
        soak.mount()
        try:
            soak.soak()
            figures = soak.check()
        finally:
            soak.close()
    ok = all(figures["checks"].values()) and not soak.failures
    result = {"minutes": args.minutes, "seed": args.seed, "fault_every_s": args.fault_every, "kinds": args.kinds,
              "faults_injected": soak.injected, "faults_survived": soak.survived, "trainer_ends": soak.ends,
              "orphans_ended_within_s_max": max(soak.orphan_seconds, default=0.0), **figures,
              "failures": soak.failures, "ok": ok}
    for name, passed in figures["checks"].items():
        print(f"{'ok  ' if passed else 'FAIL'} {name}")
    for f in soak.failures:
        print(f"FAIL {f}")
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
