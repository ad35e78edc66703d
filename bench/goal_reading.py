"""Does a model read the goal's words, or tell goals apart by their length?

Run::

    python bench/goal_reading.py --model runs/train/model-best --data runs/eval-demos

A model trained on goals of one template ("Open the Clock app.") can answer by the goal's length in
tokens alone where that length differs between targets, and never read the name: the tiny model's
warm start does (docs/training.md, "Goal-conditioned grounding"). This check replays the recorded
steps of ``--data`` (oracle episodes of the tasks, recorded with the marks: ``guiagent eval --agent
oracle --device marks true``) whose reply names an element, and asks the model (greedy, in the
prompt and format its ``guiagent_agent.json`` gives) three times: with the goal as recorded, framed
by neutral words (``rl.sft.GOAL_FRAMES``: "Please ... Thanks.", one pair drawn per step) and with
one word added at its end ("... app. a"). A model that reads the goal keeps its accuracy; one that
counts tokens loses it, and its wrong answers are the names whose goals have the length the
framed goal has.

Prints the accuracy of each way per target name and overall, and how many distinct names the
model answered. Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

_NAME = re.compile(r'"name":\s*"((?:[^"\\]|\\.)*)"')


def _reframe(chat: list, goal: str, new_goal: str) -> list:
    from rl.sft import frame_goal

    class _Fixed(random.Random):  # frame_goal draws (before, after); hand it the pair asked for
        def __init__(self, pair: tuple[str, str]):
            super().__init__(0)
            self.pair = list(pair)

        def choice(self, seq):  # noqa: ANN001, ANN201
            return self.pair.pop(0)

    before, _, after = new_goal.partition(goal)
    return frame_goal(chat, goal, _Fixed((before, after)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a model folder (with its guiagent_agent.json)")
    ap.add_argument("--data", required=True, nargs="+", help="run folders of recorded episodes (with marks)")
    ap.add_argument("--max-examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.max_examples < 1:
        ap.error("--max-examples must be at least 1")

    import torch

    from guiagent.policy import SamplingParams
    from guiagent.policy.hf import load_transformers
    from rl.agents import AgentSettings
    from rl.sft import GOAL_FRAMES, SFTConfig, load_examples, load_trajectories

    if args.threads:
        torch.set_num_threads(args.threads)
    settings = AgentSettings.load(args.model)
    if settings is None:
        print(f"goal_reading: {args.model} has no guiagent_agent.json (train or sft writes one)", file=sys.stderr)
        return 2
    try:
        trajs = load_trajectories(args.data)
    except Exception as e:  # noqa: BLE001 - a missing or broken store is one line
        print(f"goal_reading: cannot read {args.data}: {e}", file=sys.stderr)
        return 2
    policy = load_transformers(args.model, threads=args.threads or None)
    examples = [e for e in load_examples(trajs, policy, settings.format(), settings.prompt_config(), SFTConfig())
                if _NAME.search(e.target) and e.goal]
    rng = random.Random(args.seed)
    rng.shuffle(examples)
    examples = examples[:args.max_examples]
    if not examples:
        print("goal_reading: no recorded step names an element (record with --device marks true, the marks "
              "format)", file=sys.stderr)
        return 2
    sampling = SamplingParams(temperature=0.0, max_new_tokens=48)
    ways = ("recorded", "framed", "one_more_word")
    right: dict[str, Counter] = {w: Counter() for w in ways}
    total: Counter = Counter()
    answered: dict[str, Counter] = defaultdict(Counter)
    t0 = time.perf_counter()
    for e in examples:
        target = _NAME.search(e.target).group(1)
        total[target] += 1
        pairs = [(p, q) for p in GOAL_FRAMES[0] for q in GOAL_FRAMES[1] if p or q]
        before, after = rng.choice(pairs)
        chats = {"recorded": e.chat, "framed": _reframe(e.chat, e.goal, before + e.goal + after),
                 "one_more_word": _reframe(e.chat, e.goal, e.goal + " a")}
        for way in ways:
            reply = policy.generate([chats[way]], sampling)[0].text
            m = _NAME.search(reply)
            got = m.group(1) if m else "(no name)"
            right[way][target] += got == target
            answered[way][got] += 1
    n = sum(total.values())
    figures = {"model": args.model, "examples": n, "seconds": round(time.perf_counter() - t0, 1),
               **{f"accuracy_{w}": round(sum(right[w].values()) / n, 4) for w in ways},
               **{f"distinct_answers_{w}": len(answered[w]) for w in ways},
               "per_target": {t: {w: f"{right[w][t]}/{total[t]}" for w in ways} for t in sorted(total)}}
    print(f"{'target':24s} " + " ".join(f"{w:>14s}" for w in ways))
    for t in sorted(total):
        print(f"{t[:24]:24s} " + " ".join(f"{right[w][t]:>9d}/{total[t]:<4d}" for w in ways))
    print("all" + " " * 22 + " ".join(f"{figures['accuracy_' + w]:>14.1%}" for w in ways))
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
