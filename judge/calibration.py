"""How far to trust the judge: agreement with the task's own rule check, per iteration and per run.

Every judged episode of a task with a rule check carries both outcomes: the
judge's (``score >= 0.5``) and the rule's (``success >= 0.5``). With the rule as
reference, :func:`calibration` gives

* agreement  (TP + TN) / n
* precision  TP / (TP + FP)  — of the episodes the judge called a success, how many were
* recall     TP / (TP + FN)  — of the successes, how many the judge saw
* Cohen's κ  (p_o − p_e) / (1 − p_e), with p_e the agreement expected by chance from
  each side's own success rate (Cohen, 1960); 0 is chance, 1 perfect.

A value that is undefined (no pairs; no judge positives for precision; no rule
positives for recall; p_e = 1 for κ, i.e. both sides constant) is ``None``, never
a made-up number. Missing verdicts are counted apart and never enter the figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["Calibration", "calibration", "judge_metrics", "rollout_judge_metrics", "METRIC_NAMES",
           "SUCCESS_THRESHOLD"]

SUCCESS_THRESHOLD = 0.5
#: the metric names a trainer logs per iteration (a name is left out when its value is undefined)
METRIC_NAMES = ("judge/agreement", "judge/precision", "judge/recall", "judge/kappa", "judge/missing",
                "judge/judged")


@dataclass(frozen=True)
class Calibration:
    """Judge-vs-rule figures over ``n`` pairs (``None``: undefined for these pairs)."""

    n: int
    tp: int
    fp: int
    tn: int
    fn: int
    agreement: float | None
    precision: float | None
    recall: float | None
    kappa: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def calibration(pairs: Iterable[tuple[bool, bool]]) -> Calibration:
    """Figures of ``(judge_success, rule_success)`` pairs, the rule as reference.

    >>> c = calibration([(True, True), (True, False), (False, False), (False, False)])
    >>> (c.agreement, c.precision, c.recall, round(c.kappa, 4))
    (0.75, 0.5, 1.0, 0.5)
    """
    tp = fp = tn = fn = 0
    for judge, rule in pairs:
        if judge and rule:
            tp += 1
        elif judge:
            fp += 1
        elif rule:
            fn += 1
        else:
            tn += 1
    n = tp + fp + tn + fn
    if n == 0:
        return Calibration(0, 0, 0, 0, 0, None, None, None, None)
    p_o = (tp + tn) / n
    judge_yes, rule_yes = (tp + fp) / n, (tp + fn) / n
    p_e = judge_yes * rule_yes + (1 - judge_yes) * (1 - rule_yes)
    kappa = None if abs(1 - p_e) < 1e-12 else (p_o - p_e) / (1 - p_e)
    return Calibration(n, tp, fp, tn, fn, agreement=p_o,
                       precision=tp / (tp + fp) if tp + fp else None,
                       recall=tp / (tp + fn) if tp + fn else None, kappa=kappa)


def judge_metrics(verdicts: Mapping[str, Any], rule_success: Mapping[str, float | None],
                  missing: int | None = None) -> dict[str, float]:
    """The per-iteration metrics ``judge/*`` of one rollout's verdicts (what a trainer logs).

    ``verdicts``: episode id -> :class:`~judge.vlm.Verdict`; ``rule_success``:
    episode id -> the rule's success in [0, 1] (``None``: the task has no rule
    check). A verdict with an error counts as missing. Undefined figures are left
    out (a store cannot hold NaN).
    """
    pairs = []
    n_missing = 0
    for eid, v in verdicts.items():
        if getattr(v, "error", None) is not None or getattr(v, "success", None) is None:
            n_missing += 1
            continue
        rule = rule_success.get(eid)
        if rule is not None:
            pairs.append((bool(v.success), rule >= SUCCESS_THRESHOLD))
    c = calibration(pairs)
    out = {"judge/missing": float(n_missing if missing is None else missing), "judge/judged": float(c.n)}
    for name in ("agreement", "precision", "recall", "kappa"):
        value = getattr(c, name)
        if value is not None:
            out[f"judge/{name}"] = float(value)
    return out


def rollout_judge_metrics(result: Any) -> dict[str, float]:
    """:func:`judge_metrics` of a :class:`rl.rollout.RolloutResult` (its verdicts, its episodes' rule
    outcomes, its missing count): what a trainer adds to an iteration's metrics when it has a judge."""
    rule = {t.episode_id: t.success for t in result.trajectories if t.status == "completed"}
    return judge_metrics(result.verdicts, rule, result.judge_missing)


def pairs_of(judge_success: Sequence[bool], rule_success: Sequence[bool]) -> list[tuple[bool, bool]]:
    """Zip two equally long outcome lists into pairs (raises on a length mismatch)."""
    if len(judge_success) != len(rule_success):
        raise ValueError(f"{len(judge_success)} judge outcomes but {len(rule_success)} rule outcomes")
    return list(zip(map(bool, judge_success), map(bool, rule_success)))
