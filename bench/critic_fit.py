"""Does the turn-level critic learn? Explained variance of its value head on stored rollouts.

    python bench/critic_fit.py --model MODEL_DIR --runs RUN_DIR [RUN_DIR ...]

The value head of ``--algo ppo`` and ``--algo awr`` (:mod:`rl.critic`) reads the policy's
last-layer hidden state at each turn's last prompt token. This script computes those
features once with ``--model`` for the completed training episodes (those with a group) of
``--runs``, holds out 30% of the episodes, feeds the rest to the head in chunks of
``--chunk`` turns (one chunk standing for one iteration's turns, as the trainer fits after
each iteration), and prints, for each fit setting, the explained variance of the returns on
the held-out episodes before each chunk: what the advantages of that iteration would see.
1 is a perfect critic, 0 a constant one. Ends with one JSON line.

Fit settings: ``EPOCHS:CLIP`` pairs (``--settings 4:0.2 100:0.5 100:0``; clip 0 is the plain
squared error), all at ``--lr``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model folder whose hidden states the head reads")
    ap.add_argument("--runs", nargs="+", required=True, help="run folders with stored rollouts")
    ap.add_argument("--gamma", type=float, default=0.95)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--settings", nargs="+", default=["4:0.2", "100:0.5", "100:0"])
    ap.add_argument("--chunk", type=int, default=190, help="turns a fit (one iteration's worth)")
    ap.add_argument("--episodes", type=int, default=400, help="episodes drawn from the runs (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        fits = [(int(e), float(c)) for e, c in (s.split(":") for s in a.settings)]
    except ValueError:
        ap.error("--settings takes EPOCHS:CLIP pairs, e.g. 100:0.5")
    for d in a.runs:
        if not (Path(d) / "store.sqlite").is_file():
            ap.error(f"{d}: not a run folder (no store.sqlite)")

    import torch

    from guiagent.policy.hf import load_transformers
    from guiagent.store import EpisodeFilter, StoreReader
    from rl.agents import AgentSettings
    from rl.strategies.gigpo import episode_returns as _episode_returns
    from rl.critic import TurnCritic
    from rl.sft import SFTConfig, load_examples

    torch.manual_seed(a.seed)
    policy = load_transformers(a.model)
    settings = AgentSettings.load(a.model) or AgentSettings()
    trajs = []
    for d in a.runs:
        reader = StoreReader(d)
        try:
            for s in reader.iter_episodes(EpisodeFilter(status="completed")):
                if s.group_id:
                    trajs.append(reader.load_trajectory(s.episode_id, pixels=True))
        finally:
            reader.close()
    random.Random(a.seed).shuffle(trajs)
    if a.episodes:
        trajs = trajs[:a.episodes]
    t0 = time.perf_counter()
    ex = load_examples(trajs, policy, settings.format(), settings.prompt_config(), SFTConfig())
    if len(ex) < 20:
        sys.exit(f"only {len(ex)} turns with an action in {', '.join(a.runs)}: too few to measure")
    rets = {t.episode_id: _episode_returns(t, a.gamma) for t in trajs}
    g = torch.tensor([rets[e.episode_id][e.step_index] for e in ex])
    feats = TurnCritic().features(policy, [e.chat for e in ex], 8)
    feat_s = time.perf_counter() - t0
    eps = sorted({e.episode_id for e in ex})
    held = set(eps[: len(eps) * 3 // 10])
    train = torch.tensor([e.episode_id not in held for e in ex])
    idx = torch.nonzero(train).squeeze(-1)
    chunks = [idx[i:i + a.chunk] for i in range(0, len(idx), a.chunk)]

    def ev(v: torch.Tensor, y: torch.Tensor) -> float:
        return 1.0 - float((y - v).var()) / max(float(y.var()), 1e-12)

    print(f"{len(trajs)} episodes, {len(ex)} turns ({int((~train).sum())} held out), features "
          f"{tuple(feats.shape)} in {feat_s:.0f} s; returns mean {float(g.mean()):.3f} var {float(g.var()):.3f}; "
          f"load {os.getloadavg()[0]:.1f}")
    rows = []
    for epochs, clip in fits:
        critic = TurnCritic(lr=a.lr, epochs=epochs, clip_eps=clip or None, seed=a.seed)
        curve, fit_s = [], 0.0
        for ch in chunks:
            curve.append(round(ev(critic.values(feats[~train]), g[~train]), 3))
            t1 = time.perf_counter()
            critic.fit(feats[ch], g[ch], critic.values(feats[ch]))
            fit_s = max(fit_s, time.perf_counter() - t1)
        curve.append(round(ev(critic.values(feats[~train]), g[~train]), 3))
        rows.append({"epochs": epochs, "clip": clip, "held_out_ev": curve, "fit_seconds_max": round(fit_s, 3)})
        print(f"epochs {epochs:4d} clip {clip:<4}  held-out explained variance before each fit: "
              f"{' '.join(f'{x:5.2f}' for x in curve)}  (a fit <= {fit_s:.2f} s)")
    print(json.dumps({"bench": "critic_fit", "model": a.model, "turns": len(ex), "chunk": a.chunk, "lr": a.lr,
                      "fits": rows, "load": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
