"""Turns/s of a semi-online iteration against an online one, same tiny policy, batch and turn count.

    python bench/semi_online.py                     # ~6-8 min on 2 shared cores
    python bench/semi_online.py --episodes 16 --group-size 4 --turns 3 --max-new-tokens 32

Set-up: the tiny Qwen2.5-VL from :mod:`guiagent.policy.tiny` (built offline into a temp
folder with the training warm start's pixel limit) as a :class:`rl.agents.ModelAgent`
sampling the way training does (temperature 1, ``keep_chats=True``, the compact
prompt, CPU). Oracle demonstrations of the fixed-layout webapps tasks (``--tasks``)
are recorded first on an in-process pool (real Chromium), outside the timing.

* **online**: :func:`rl.rollout.run_rollout` on an :class:`~emulators.pool.InProcessPool`
  with ``--episodes`` slots (so all episodes run side by side, one generation call per
  turn), ``--episodes / --group-size`` groups of ``--group-size``, at most ``--turns``
  steps an episode;
* **semi-online**: :func:`rl.replay.run_semi_online` on ``--episodes / --group-size``
  recorded episodes cut to ``--turns`` steps, ``--group-size`` samples each, patch
  budget unlimited (every sample acts at every recorded screen: exactly ``--turns``
  turns), so the same number of samples act side by side.

Both write every step to a real store. ``--rounds`` online and semi-online runs
alternate; reported per run: policy turns, wall seconds, turns/s, the share of time in
the policy, the time a turn spends outside the policy (envs, store, bookkeeping) and
the generated tokens a turn (a random-init model stops at different lengths, which
moves generation time); then the medians and the ratio semi/online of turns/s. The load
average is printed (the machine is shared). The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from emulators.pool import InProcessPool  # noqa: E402
from guiagent.store import Store  # noqa: E402
from rl.agents import COMPACT_JSON_PROMPT, AgentSettings, OraclePolicy, load_agent  # noqa: E402
from rl.rollout import make_groups, run_rollout  # noqa: E402
from rl.patching import PatchConfig  # noqa: E402
from rl.replay import run_semi_online  # noqa: E402


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def figures(res) -> dict:
    wall = res.wall_seconds
    toks = [len(t.completion_ids) for t in res.turns]
    return {
        "turns": res.env_steps,
        "episodes": len(res.trajectories),
        "wall_s": round(wall, 3),
        "turns_per_s": round(res.env_steps / wall, 3) if wall else 0.0,
        "policy_share": round(res.policy_seconds / wall, 3) if wall else 0.0,
        "non_policy_s_per_turn": round((wall - res.policy_seconds) / max(res.env_steps, 1), 4),
        "tokens_per_turn": round(sum(toks) / len(toks), 1) if toks else 0.0,
        "load_avg": load_avg(),
    }


def show(label: str, f: dict) -> None:
    print(
        f"{label:<14} {f['turns_per_s']:6.3f} turns/s  ({f['turns']} turns, {f['episodes']} episodes, "
        f"{f['wall_s']:.1f} s, policy {f['policy_share']:.1%}, {f['non_policy_s_per_turn'] * 1000:.0f} ms "
        f"a turn outside the policy, {f['tokens_per_turn']:.0f} tokens a turn)  load {f['load_avg']}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["open_app", "settings_turn_on"])
    ap.add_argument(
        "--episodes", type=int, default=8, help="episodes (samples) per iteration, all side by side"
    )
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2, help="steps per episode (online: at most)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--rounds", type=int, default=2, help="online and semi-online runs, alternated; medians reported"
    )
    args = ap.parse_args()
    if args.episodes % args.group_size:
        ap.error("--episodes must be a multiple of --group-size")

    import torch

    from guiagent.policy.tiny import TinyModelSpec, build_tiny_model
    from rl.trainer import TINY_MAX_PIXELS

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="guiagent-bench-semi-"))
    info = build_tiny_model(TinyModelSpec(size="tiny", max_pixels=TINY_MAX_PIXELS), tmp / "model")
    model = load_agent(
        str(tmp / "model"),
        settings=AgentSettings(system_prompt=COMPACT_JSON_PROMPT),
        temperature=1.0,
        max_new_tokens=args.max_new_tokens,
        keep_chats=True,
        threads=args.threads,
    )
    store = Store.open(tmp / "store")
    n_groups = args.episodes // args.group_size
    print(
        f"tiny model {info['params']:,} parameters, {args.threads} threads, "
        f"max_new_tokens {args.max_new_tokens}; "
        f"{args.episodes} episodes ({n_groups} groups of {args.group_size}), {args.turns} turns; "
        f"tasks {', '.join(args.tasks)}; load {load_avg()}",
        flush=True,
    )
    picks = [args.tasks[i % len(args.tasks)] for i in range(n_groups)]

    with InProcessPool("webapps", num_slots=args.episodes) as pool:
        run = store.create_run("bench-semi-record", env="webapps", algo="oracle")
        rec = run_rollout(
            pool,
            OraclePolicy(),
            make_groups(picks, [500 + i for i in range(n_groups)], 1),
            store=store,
            run_id=run,
            suite="webapps",
        )
        recorded = [replace(t, steps=t.steps[: args.turns]) for t in rec.trajectories]
        short = [t.num_steps for t in recorded if t.num_steps < args.turns]
        if short:
            print(f"note: {len(short)} recorded episodes are shorter than {args.turns} steps: {short}")
        # warm-up outside the timing: pages loaded, one generation per slot
        run_rollout(
            pool,
            model,
            make_groups(picks, [900 + i for i in range(n_groups)], args.group_size, max_steps=1),
            suite="webapps",
        )

        ons, semis = [], []
        for r in range(args.rounds):
            # alternated, so both modes see the same (shared, noisy) machine
            run = store.create_run(f"bench-semi-online-{r}", env="webapps", algo="bench")
            online = run_rollout(
                pool,
                model,
                make_groups(
                    picks, [100 + 10 * r + i for i in range(n_groups)], args.group_size, max_steps=args.turns
                ),
                store=store,
                run_id=run,
                suite="webapps",
            )
            ons.append(figures(online))
            show(f"online #{r}", ons[-1])
            run = store.create_run(f"bench-semi-semi-{r}", env="webapps", algo="bench")
            semi = run_semi_online(
                model,
                recorded,
                group_size=args.group_size,
                patch=PatchConfig(mode="recorded", budget=-1),
                store=store,
                run_id=run,
            )
            semis.append(figures(semi))
            show(f"semi-online #{r}", semis[-1])

    def median(fs: list[dict], key: str) -> float:
        return statistics.median(f[key] for f in fs)

    on = {
        k: median(ons, k) for k in ("turns_per_s", "policy_share", "non_policy_s_per_turn", "tokens_per_turn")
    }
    so = {k: median(semis, k) for k in on}
    ratio = so["turns_per_s"] / on["turns_per_s"] if on["turns_per_s"] else None
    print(f"semi-online / online turns/s: {ratio:.2f}x" if ratio else "ratio: n/a")
    print(f"os.getloadavg(): {os.getloadavg()}")
    store.close()
    print(
        f"median online {on['turns_per_s']:.3f} turns/s, semi-online {so['turns_per_s']:.3f} turns/s; "
        f"outside the policy: online {on['non_policy_s_per_turn'] * 1000:.0f} ms a turn, "
        f"semi-online {so['non_policy_s_per_turn'] * 1000:.0f} ms"
    )
    print(
        json.dumps(
            {
                "bench": "semi_online",
                "online": on,
                "semi_online": so,
                "runs": {"online": ons, "semi_online": semis},
                "ratio_turns_per_s": round(ratio, 3) if ratio else None,
                "episodes": args.episodes,
                "group_size": args.group_size,
                "turns": args.turns,
                "max_new_tokens": args.max_new_tokens,
                "load_avg": list(os.getloadavg()),
            }
        )
    )


if __name__ == "__main__":
    main()
