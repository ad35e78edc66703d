"""The field's offline step metrics on recorded episodes (AndroidControl-style), as pure functions.

An offline evaluation asks the agent for one action at every recorded step, with the recorded
steps before it as the history (teacher forcing), and scores it against the step's target
(:func:`rl.match.match_action`). Per step that gives a :class:`StepOutcome`; :func:`offline_metrics`
aggregates them:

- **type accuracy**: the predicted action has the recorded kind (:attr:`MatchResult.kind_match`;
  scroll and swipe are one kind, so are the system buttons with the default rules);
- **grounding accuracy**: among steps whose target is a point (tap, long press) and whose prediction
  has the right kind, the share whose point hits the target (a candidate box, enlarged, or within the
  point tolerance);
- **step success rate** (step SR): the prediction matches the step (kind and arguments);
- **episode success**: every step of the episode matches (what a flawless replay needs).

Each overall and per action kind (:func:`kind_row`), for the high level (the goal alone) and the
low level (the goal and the step instruction). :func:`to_run_metrics` flattens them into the
store's run metrics (``offline/<level>/<name>`` and ``offline/<level>/<kind>/<name>``);
:func:`from_run_metrics` reads them back (the web UI's run page).

    >>> m = offline_metrics([StepOutcome("e", "click", True, True, True), StepOutcome("e", "wait", True, False, False)])
    >>> (m.type_acc, m.grounding_acc, m.step_sr, m.episode_success)
    (0.5, 1.0, 0.5, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = ["StepOutcome", "KindMetrics", "OfflineMetrics", "offline_metrics", "kind_row", "to_run_metrics",
           "from_run_metrics", "LEVELS", "POINT_KINDS"]

#: high: the goal alone; low: the goal and the step's instruction (AndroidControl's two settings)
LEVELS = ("high", "low")
#: the kinds whose target is a point (grounding accuracy is measured on them)
POINT_KINDS = frozenset({"click", "long_press", "double_click", "right_click", "hover"})
_NAMES = ("steps", "type_acc", "grounding_acc", "grounding_steps", "step_sr")


def kind_row(kind: str, button: str | None = None) -> str:
    """The row a recorded step counts under: its kind, with scroll and swipe as ``swipe`` and the back,
    home and Enter buttons as ``system_button``."""
    if button is not None or kind in ("back", "home"):
        return "system_button"
    return {"scroll": "swipe"}.get(kind, kind)


@dataclass(frozen=True)
class StepOutcome:
    """One recorded step, scored: the episode it belongs to, its row (:func:`kind_row`), whether the
    prediction parsed, had the right kind, and matched."""

    episode_id: str
    kind: str
    parsed: bool
    type_match: bool
    matched: bool


@dataclass(frozen=True)
class KindMetrics:
    """The metrics over one set of steps; ``grounding_acc`` is ``None`` without a type-matched point step."""

    steps: int
    type_acc: float
    grounding_acc: float | None
    grounding_steps: int
    step_sr: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class OfflineMetrics(KindMetrics):
    """Overall metrics, plus ``parse_rate``, ``episodes``, ``episode_success`` and ``per_kind``."""

    parse_rate: float = 0.0
    episodes: int = 0
    episode_success: float = 0.0
    per_kind: Mapping[str, KindMetrics] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "per_kind"}
        d["per_kind"] = {k: v.to_dict() for k, v in self.per_kind.items()}
        return d


def _mean(xs: list[bool]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _kind_metrics(outs: list[StepOutcome]) -> KindMetrics:
    ground = [o.matched for o in outs if o.kind in POINT_KINDS and o.type_match]
    return KindMetrics(len(outs), _mean([o.type_match for o in outs]), _mean(ground) if ground else None,
                       len(ground), _mean([o.matched and o.type_match for o in outs]))


def offline_metrics(outcomes: Iterable[StepOutcome]) -> OfflineMetrics:
    """Aggregate scored steps (pure; see the module docstring)."""
    outs = list(outcomes)
    overall = _kind_metrics(outs)
    by_kind: dict[str, list[StepOutcome]] = {}
    by_ep: dict[str, list[bool]] = {}
    for o in outs:
        by_kind.setdefault(o.kind, []).append(o)
        by_ep.setdefault(o.episode_id, []).append(o.matched and o.type_match)
    return OfflineMetrics(
        **overall.__dict__,
        parse_rate=_mean([o.parsed for o in outs]),
        episodes=len(by_ep),
        episode_success=_mean([all(v) for v in by_ep.values()]),
        per_kind={k: _kind_metrics(v) for k, v in sorted(by_kind.items())},
    )


def to_run_metrics(metrics: OfflineMetrics, level: str) -> dict[str, float]:
    """Flat run metrics: ``offline/<level>/<name>`` overall, ``offline/<level>/<kind>/<name>`` per kind
    (a kind without a grounding figure has none)."""
    p = f"offline/{level}"
    out: dict[str, float] = {f"{p}/{k}": float(getattr(metrics, k)) for k in
                             ("steps", "type_acc", "step_sr", "parse_rate", "episodes", "episode_success",
                              "grounding_steps")}
    if metrics.grounding_acc is not None:
        out[f"{p}/grounding_acc"] = metrics.grounding_acc
    for kind, m in metrics.per_kind.items():
        for name in _NAMES:
            v = getattr(m, name)
            if v is not None:
                out[f"{p}/{kind}/{name}"] = float(v)
    return out


def from_run_metrics(values: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """The run metrics :func:`to_run_metrics` wrote, back as ``{level: {"overall": {...}, "per_kind":
    {kind: {...}}}}`` (names it does not know are left out; NaN and missing figures read as ``None``)."""
    out: dict[str, dict[str, Any]] = {}
    for name, v in values.items():
        parts = name.split("/")
        if len(parts) not in (3, 4) or parts[0] != "offline" or not parts[1]:
            continue
        val = None if v is None or (isinstance(v, float) and math.isnan(v)) else v
        lvl = out.setdefault(parts[1], {"overall": {}, "per_kind": {}})
        if len(parts) == 3:
            lvl["overall"][parts[2]] = val
        else:
            lvl["per_kind"].setdefault(parts[2], {})[parts[3]] = val
    return out
