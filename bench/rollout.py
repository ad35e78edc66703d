"""Env steps/s of the whole rollout loop (:func:`rl.rollout.run_rollout`) on webapps, and where its time goes.

    python bench/rollout.py                          # 1..16 in-process slots + Ray 1x4, 2x4; ~5-8 min
    python bench/rollout.py --policies random --slots 8 --ray-workers   # the env-only target alone
    python bench/rollout.py --policies random --one-after-another      # the old sequential stepping
    python bench/rollout.py --policies random --tree none             # observations without the ARIA tree

For each number of slots: an :class:`~emulators.pool.InProcessPool` of the webapps
suite (every slot a browser context in one shared Chromium) runs groups of
episodes of the fixed-layout tasks (``--tasks``; 3 steps at most each) with

* **model**: the tiny Qwen2.5-VL from :mod:`guiagent.policy.tiny` (built offline into a temp
  folder with the training warm start's pixel limit, ~128 visual tokens a screenshot) as a
  :class:`rl.agents.ModelAgent` the way training samples: temperature 1,
  ``--max-new-tokens`` 32, ``keep_chats=True``, the compact system prompt, CPU, ``--threads``;
* **random**: :class:`rl.agents.RandomPolicy` (no model): the ceiling the envs allow.

Every step is appended to a real :class:`guiagent.store.Store` in a temp folder. Each
pool is warmed up first (browser launch, first page loads, one generation), outside
the timing. Reported per setting: env steps/s (steps / wall time of ``run_rollout``)
and the share of wall time in ``env`` (pool reset + step calls), ``policy``
(``act_batch``: prompt building, image preprocessing, generation, parsing), ``store``
(episode begin/step/end writes) and ``other`` (rewards, bookkeeping): the
``RolloutResult`` timers; and the CPU milliseconds an env step, summed over this process
and the browsers', drivers' (and Ray workers') processes (``bench/cpu.py``). The in-process pool steps its slots side by side
(``--one-after-another``: sequentially, as before). Then each Ray pool of
``--ray-workers`` workers x ``--ray-envs-per-worker`` envs runs the same policies. Memory:
PSS of the Chromium + Playwright driver processes per slot (Ray: the worker processes
with theirs). The load average is printed with each figure (the machine is shared). The
last stdout line is one JSON object; its ``targets`` say whether the random agent with 8
in-process slots reached 25 env steps/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench.cpu import cpu_by_process  # noqa: E402
from emulators.pool import InProcessPool, RayEnvPool  # noqa: E402
from guiagent.store import Store  # noqa: E402
from rl.agents import COMPACT_JSON_PROMPT, AgentSettings, RandomPolicy, load_agent  # noqa: E402
from rl.rollout import make_groups, run_rollout  # noqa: E402


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def requests(tasks: list[str], episodes: int, group_size: int, seed0: int):
    n_groups = max(1, episodes // group_size)
    picks = [tasks[i % len(tasks)] for i in range(n_groups)]
    return make_groups(picks, [seed0 + i for i in range(n_groups)], group_size)


def cpu_seconds(roots: list[int]) -> dict[str, float]:
    """CPU seconds so far of the processes under ``roots`` (this process, or Ray workers), by kind."""
    total: dict[str, float] = {}
    for root in roots:
        for kind, sec in cpu_by_process(root).items():
            total[kind] = total.get(kind, 0.0) + sec
    return total


def measure(pool, policy, store: Store, run_id: str, tasks: list[str], episodes: int, group_size: int,
            seed0: int, cpu_roots: list[int]) -> dict:
    cpu0 = cpu_seconds(cpu_roots)
    res = run_rollout(pool, policy, requests(tasks, episodes, group_size, seed0), store=store, run_id=run_id,
                      suite="webapps")
    cpu1 = cpu_seconds(cpu_roots)
    steps = max(res.env_steps, 1)
    cpu = {k: round(1e3 * (cpu1.get(k, 0) - cpu0.get(k, 0)) / steps, 1) for k in sorted(set(cpu0) | set(cpu1))}
    wall = res.wall_seconds
    share = {"env": res.env_seconds / wall, "policy": res.policy_seconds / wall, "store": res.store_seconds / wall}
    share["other"] = max(0.0, 1.0 - sum(share.values()))
    # generated tokens per turn vary (a random-init model may stop at once or run to the limit)
    toks = [len(u.completion_ids) for u in res.turns]
    return {"episodes": len(res.trajectories), "aborted": res.aborted, "env_steps": res.env_steps,
            "wall_s": round(wall, 3), "steps_per_s": round(res.steps_per_second, 2),
            "share": {k: round(v, 3) for k, v in share.items()},
            "tokens_per_turn": round(sum(toks) / len(toks), 1) if toks else 0.0,
            "policy_s_per_step": round(res.policy_seconds / max(res.env_steps, 1), 4),
            "policy_tokens_per_s": round(sum(toks) / res.policy_seconds, 1) if res.policy_seconds else 0.0,
            "cpu_ms_per_step": round(sum(cpu.values()), 1), "cpu_by_process": {k: v for k, v in cpu.items() if v},
            "load_avg": load_avg()}


def show(label: str, r: dict) -> None:
    s = r["share"]
    print(f"{label:<22} {r['steps_per_s']:6.2f} steps/s  ({r['env_steps']} steps, {r['episodes']} episodes, "
          f"{r['wall_s']:.1f} s; env {s['env']:.1%} policy {s['policy']:.1%} store {s['store']:.1%} "
          f"other {s['other']:.1%}; {r['tokens_per_turn']:.0f} tokens a turn, policy "
          f"{r['policy_s_per_step']:.3f} s a step, {r['policy_tokens_per_s']:.0f} tokens/s; "
          f"{r['cpu_ms_per_step']:.0f} ms CPU a step)  load {r['load_avg']}", flush=True)


def tree_pss_mib(root: int, *, include_root: bool = False) -> float:
    """PSS (MiB) of ``root``'s descendants (Chromium, the Playwright driver), ``root`` too if asked."""
    parents: dict[int, int] = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                with open(f"/proc/{e.name}/stat") as f:
                    st = f.read()
                parents[int(e.name)] = int(st[st.rfind(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    pids, todo = ([root] if include_root else []), [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        pids += kids
        todo += kids
    kib = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                kib += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, ValueError):
            pass
    return kib / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--policies", nargs="+", default=["model", "random"], choices=["model", "random"])
    ap.add_argument("--tasks", nargs="+", default=["open_app", "settings_turn_on"])
    ap.add_argument("--episodes-per-slot", type=int, default=1, help="model policy: episodes per slot (min 4)")
    ap.add_argument("--random-episodes-per-slot", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one-after-another", action="store_true",
                    help="in-process pools step their slots one after another (the old way), for a before column")
    ap.add_argument("--ray-workers", type=int, nargs="*", default=[1, 2],
                    help="also RayEnvPools of this many workers x --ray-envs-per-worker (none: skip Ray)")
    ap.add_argument("--ray-envs-per-worker", type=int, default=4)
    ap.add_argument("--tree", choices=["aria", "none"], default="aria",
                    help="the devices' ARIA tree in each observation (none: screenshots only)")
    args = ap.parse_args()
    device_options = {"tree": args.tree}

    import torch

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="guiagent-bench-rollout-"))
    model, info = None, {"params": 0}
    if "model" in args.policies:
        from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
        from rl.config import TINY_MAX_PIXELS
        info = build_tiny_model(TinyModelSpec(size="tiny", max_pixels=TINY_MAX_PIXELS), tmp / "model")
        settings = AgentSettings(system_prompt=COMPACT_JSON_PROMPT)
        model = load_agent(str(tmp / "model"), settings=settings, temperature=1.0,
                           max_new_tokens=args.max_new_tokens, keep_chats=True, threads=args.threads)
        print(f"tiny model {info['params']:,} parameters, {args.threads} threads, max_new_tokens "
              f"{args.max_new_tokens}", flush=True)
    store = Store.open(tmp / "store")
    print(f"tasks {', '.join(args.tasks)}; slots stepped "
          f"{'one after another' if args.one_after_another else 'side by side'}; load {load_avg()}", flush=True)

    def policies(n: int):
        for name in args.policies:
            if name == "model":
                yield "model", model, args.episodes_per_slot
            else:
                yield "random", RandomPolicy(seed=n), args.random_episodes_per_slot

    results: list[dict] = []
    t_all = time.perf_counter()
    for n in args.slots:
        with InProcessPool("webapps", num_slots=n, concurrent=not args.one_after_another,
                           device_options=device_options) as pool:
            run_id = store.create_run(f"bench-rollout-{n}", env="webapps", algo="bench")
            # warm-up: browser and contexts started, pages loaded once (one generation with the model)
            run_rollout(pool, model or RandomPolicy(seed=0), requests(args.tasks, n, 1, 10_000)[:n], store=store,
                        run_id=run_id, suite="webapps")
            mem = tree_pss_mib(os.getpid()) / n
            for name, policy, per_slot in policies(n):
                r = measure(pool, policy, store, run_id, args.tasks, max(4, per_slot * n), args.group_size, 100 * n,
                            [os.getpid()])
                r.update(pool="inprocess", slots=n, policy=name, browser_mib_per_slot=round(mem, 1),
                         side_by_side=not args.one_after_another)
                results.append(r)
                show(f"inprocess {n} slots {name}", r)
            print(f"{'':<22} Chromium + driver PSS {mem:.0f} MiB a slot", flush=True)
    for w in args.ray_workers or []:
        k = args.ray_envs_per_worker
        with RayEnvPool("webapps", num_workers=w, envs_per_worker=k, device_options=device_options) as pool:
            run_id = store.create_run(f"bench-rollout-ray-{w}", env="webapps", algo="bench")
            run_rollout(pool, model or RandomPolicy(seed=0), requests(args.tasks, w * k, 1, 10_000)[:w * k],
                        store=store, run_id=run_id, suite="webapps")
            mem = sum(tree_pss_mib(pid, include_root=True) for pid in pool.worker_pids()) / (w * k)
            for name, policy, per_slot in policies(w * k):
                r = measure(pool, policy, store, run_id, args.tasks, max(4, per_slot * w * k), args.group_size,
                            900 + 100 * w, [os.getpid()])  # the local Ray (and its workers) runs under this process
                r.update(pool=f"ray_{w}x{k}", slots=w * k, policy=name, mib_per_slot=round(mem, 1))
                results.append(r)
                show(f"ray {w}x{k} {name}", r)
            print(f"{'':<22} worker + Chromium + driver PSS {mem:.0f} MiB a slot", flush=True)
    store.close()
    print(f"total {time.perf_counter() - t_all:.0f} s")
    target = next((r for r in results if r["pool"] == "inprocess" and r["slots"] == 8 and r["policy"] == "random"),
                  None)
    targets = {}
    if target is not None:
        targets["random_8_slots_steps_per_s"] = {"value": target["steps_per_s"], "target": 25,
                                                 "met": target["steps_per_s"] >= 25, "load_avg": target["load_avg"],
                                                 "cpu_ms_per_step": target["cpu_ms_per_step"]}
        ray = next((r for r in results if r["pool"].startswith("ray_") and r["slots"] == 8 and r["policy"] == "random"),
                   None)
        if ray is not None:  # beside it: the same 8 slots on Ray workers
            targets["random_8_slots_steps_per_s"]["ray"] = {"pool": ray["pool"], "value": ray["steps_per_s"],
                                                            "load_avg": ray["load_avg"],
                                                            "cpu_ms_per_step": ray["cpu_ms_per_step"]}
    print(json.dumps({"bench": "rollout", "model_params": info["params"], "threads": args.threads, "tree": args.tree,
                      "max_new_tokens": args.max_new_tokens, "tasks": args.tasks,
                      "side_by_side": not args.one_after_another, "results": results, "targets": targets}))


if __name__ == "__main__":
    main()
