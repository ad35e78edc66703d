"""A rollout's metrics (success, reward parts, parse errors, entropy; per suite of a mixed run) and
the words the iteration line uses when an iteration made no update; the stability guards, which
read an iteration's metrics."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rl.settings import GuardSettings

__all__ = ["rollout_metrics", "suite_metrics", "no_update_reason", "iteration_line", "guard_tripped"]


def no_update_reason(m: dict[str, float]) -> str:
    """Why an iteration made no update, from its metrics: aborted episodes are named as such,
    never counted among the groups whose episodes got equal rewards."""
    if m.get("critic_warmup"):
        ev = f" (explained variance {m['explained_variance']:.2f})" if "explained_variance" in m else ""
        return "critic warm-up, the actor waits" + ev
    reasons = []
    aborted, short = int(m.get("aborted", 0)), int(m.get("groups_short", 0))
    if aborted:
        left = f", leaving {short} group(s) with fewer than 2 completed episodes" if short else ""
        reasons.append(f"{aborted} episode(s) aborted{left}")
    equal = int(m.get("groups_equal", 0))
    if equal:
        reasons.append(f"{equal} group(s) got equal rewards")
    return "; ".join(reasons) or "no completed episode"


def rollout_metrics(result: Any, suites: Any = ()) -> dict[str, float]:
    """The rollout's metrics; ``suites``: a mixed run's suites, each also measured on its own."""
    trajs = [t for t in result.trajectories if t.status == "completed"]
    steps = [s for t in trajs for s in t.steps]
    m: dict[str, float] = {
        "success_rate": sum(t.success for t in trajs) / max(len(trajs), 1),
        "reward_mean": sum(t.total_reward for t in trajs) / max(len(trajs), 1),
        "episode_length": len(steps) / max(len(trajs), 1),
        "parse_error_rate": sum(s.parse_error is not None for s in steps) / max(len(steps), 1),
        "resampled_rate": sum(bool(s.metadata.get("rejected_replies")) for s in steps) / max(len(steps), 1),
        "aborted": float(result.aborted), "env_steps": float(result.env_steps),
        "env_steps_per_s": result.steps_per_second,
        "rollout_seconds": result.wall_seconds,
    }
    for name in sorted({k for s in steps for k in s.reward_parts}):
        m[f"reward/{name}"] = sum(s.reward_parts.get(name, 0.0) for s in steps) / max(len(trajs), 1)
    m.update(suite_metrics(result.trajectories, suites))
    lps = [lp for u in result.turns for lp in u.old_logprobs]
    if lps:  # −E[log π(a)] over sampled tokens: a Monte-Carlo estimate of the policy's entropy
        m["entropy"] = -sum(lps) / len(lps)
    return m


def suite_metrics(trajectories: Any, suites: Any) -> dict[str, float]:
    """A mixed run's metrics per suite (``suite/<name>/episodes``, ``aborted``, and with completed
    episodes ``success_rate`` and ``reward_mean``); nothing for a run over one suite."""
    suites = [s.strip() for s in suites if s.strip()]
    if len(suites) < 2:
        return {}
    by: dict[str, list[Any]] = {s: [] for s in suites}
    for t in trajectories:
        # an episode aborted at its reset carries the run's env and the qualified task id
        suite = t.task.suite if "," not in t.task.suite else t.task.task_id.partition(".")[0]
        by.setdefault(suite, []).append(t)
    m: dict[str, float] = {}
    for suite, ts in by.items():
        done = [t for t in ts if t.status == "completed"]
        m[f"suite/{suite}/episodes"] = float(len(done))
        m[f"suite/{suite}/aborted"] = float(len(ts) - len(done))
        if done:
            m[f"suite/{suite}/success_rate"] = sum(t.success for t in done) / len(done)
            m[f"suite/{suite}/reward_mean"] = sum(t.total_reward for t in done) / len(done)
    return m


def iteration_line(it: int, iterations: int, m: dict[str, float], *, redrawn: bool = False) -> str:
    """The log line of iteration ``it`` (0-based) from its metrics."""
    upd = f"loss {m['loss']:.4f} grad {m['grad_norm']:.3f}" if "loss" in m else "no update: " + no_update_reason(m)
    alarms = " ".join(k.split("/", 1)[1].upper() for k in m if k.startswith("alarm/"))
    ent = f" entropy {m['entropy']:.2f}" if "entropy" in m else ""
    aborted = f" aborted {int(m['aborted'])}" if m.get("aborted") else ""
    mode = "[semi] " if m.get("semi_online") else ""
    redraw = f" (redrawn {m.get('resampled_rate', 0.0):.2f})" if redrawn else ""
    return (f"[{it + 1}/{iterations}] {mode}success {m['success_rate']:.2f} reward {m['reward_mean']:.3f} "
            f"len {m['episode_length']:.1f} parse-err {m['parse_error_rate']:.2f}{redraw}{ent}{aborted} {upd} "
            f"({m['iteration_seconds']:.1f} s)" + (f" ALARM {alarms}" if alarms else ""))


def guard_tripped(g: "GuardSettings", m: dict[str, float]) -> str | None:
    """The first stability guard ``m`` trips (None: all within bounds); alarms go into ``m`` either way."""
    if g.min_entropy and m.get("entropy", math.inf) < g.min_entropy:
        m["alarm/entropy"] = 1.0
    gap = m.get("mismatch_mean_abs")
    if g.max_engine_gap and gap is not None and gap > g.max_engine_gap:
        m["alarm/engine_gap"] = 1.0  # the trainer stops on this one: a rollback cannot mend the engine
        return (f"the rollout engine's log-probs are {gap:.3f} nats a token from the learner's (mean |diff| > "
                f"--max-engine-gap {g.max_engine_gap}): stale weights in the engine")
    if g.max_parse_error_rate and m["parse_error_rate"] > g.max_parse_error_rate:
        m["alarm/parse_error_rate"] = 1.0
        return f"parse-error rate {m['parse_error_rate']:.2f} > --max-parse-error-rate {g.max_parse_error_rate}"
    if g.max_kl_ref and m.get("kl", 0.0) > g.max_kl_ref:
        m["alarm/kl_ref"] = 1.0
        return f"KL to the reference {m['kl']:.4f} > --max-kl-ref {g.max_kl_ref}"
    return None
