"""Parity of :mod:`rl.match` with UI-S1's reference matcher, on UI-S1's own files.

UI-S1 (https://github.com/X-PLUG/MobileAgent/tree/main/UI-S1) scores a model's action with
``check_response_match`` in ``verl/utils/reward_score/gui_utils/utils.py``. :func:`uis1_reference`
re-states its semantics here (written from its description, not copied) on the raw records: the
truth is a step's ``check_options`` (or its ``action_content``), the prediction an action in UI-S1's
own dict form, both in pixels of a ``w`` x ``h`` screen. It returns UI-S1's pair
``(type_match, extract_match)``.

``fix_boxes=True`` (the reference the parity figures use) mends UI-S1's box bug: it divides the
candidate boxes by the screen size only when ``candidate_bbox`` has exactly four entries (meant for
one flat box), so a list of one, two or three boxes stays in pixels and is compared with the
normalised tap (a box ``[0, 473, 1080, 2337]`` then holds every tap on the screen), and a list of four
boxes crashes (a list divided by a number). Fixed: every box is normalised, the flat box and lists
alike. ``fix_boxes=False`` keeps the bug, crash included (``TypeError``), to count what it changes.

:func:`probes` builds the actions a parity run asks both matchers about, per recorded step;
:func:`compare` runs them and counts agreement per action kind, with a reason for each disagreement
(:func:`disagreement_reason`).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from guiagent.types import (
    Action,
    Answer,
    Click,
    Finish,
    Key,
    LongPress,
    NavigateBack,
    NavigateHome,
    OpenApp,
    Scroll,
    Step,
    StepTarget,
    Swipe,
    Type,
    Wait,
)
from rl.match import MatchConfig, match_action, step_target

__all__ = ["uis1_reference", "to_uis1", "probes", "truth_kind", "compare", "ParityReport", "disagreement_reason"]

_ENLARGE = 1.2
_DIST = 0.04


def _direction(x1: float, y1: float, x2: float, y2: float) -> str:
    dx, dy = x2 - x1, y2 - y1
    return ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")


def _contains(pred: str, gold: str) -> bool:
    p, g = str(pred).lower().strip(), str(gold).lower().strip()
    return p in g or g in p


def _norm(d: dict, w: float, h: float, fix_boxes: bool) -> dict:
    d = dict(d)
    boxes = d.get("candidate_bbox")
    if boxes is not None:
        flat = len(boxes) == 4 and all(isinstance(v, (int, float)) for v in boxes)
        if fix_boxes:
            boxes = [boxes] if flat else boxes
            d["candidate_bbox"] = [[b[0] / w, b[1] / h, b[2] / w, b[3] / h] for b in boxes]
        elif len(boxes) == 4:  # UI-S1: meant for one flat box; a list of four boxes raises here
            x0, y0, x1, y1 = boxes
            d["candidate_bbox"] = [[x0 / w, y0 / h, x1 / w, y1 / h]]
    for k in ("coordinate", "coordinate2"):
        if k in d:
            d[k] = [d[k][0] / w, d[k][1] / h]
    return d


def uis1_reference(pred: dict, truth: dict, w: float, h: float, *, fix_boxes: bool = True) -> tuple[bool, bool]:
    """UI-S1's ``(type_match, extract_match)`` of ``pred`` against ``truth`` (see the module docstring)."""
    p, t = _norm(pred, w, h, fix_boxes), _norm(truth, w, h, fix_boxes)
    pk, tk = p.get("action"), t.get("action")
    if tk in ("wait", "terminate"):
        return (True, True) if pk == tk else (False, False)
    if tk == "system_button":
        if pk != "system_button":
            return False, False
        return True, str(t["button"]).lower().strip() == str(p["button"]).lower().strip()
    if tk in ("type", "answer", "key"):
        return (True, _contains(p["text"], t["text"])) if pk == "type" else (False, False)
    if tk == "open":
        return (True, _contains(p["text"], t["text"])) if pk == "open" else (False, False)
    if tk == "swipe":
        if pk != "swipe":
            return False, False
        gt = t["direction"] if "direction" in t else _direction(*t["coordinate"], *t["coordinate2"])
        gt = {"up": "down", "down": "up"}.get(gt, gt)  # UI-S1 flips the vertical axis only
        return True, _direction(*p["coordinate"], *p["coordinate2"]) == gt
    if tk in ("click", "long_press"):
        if pk != tk:
            return False, False
        x, y = p["coordinate"]
        for b in t.get("candidate_bbox", []):
            cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
            hw, hh = (b[2] - b[0]) * _ENLARGE / 2, (b[3] - b[1]) * _ENLARGE / 2
            if cx - hw <= x <= cx + hw and cy - hh <= y <= cy + hh:
                return True, True
        gx, gy = t["coordinate"]
        return True, math.hypot(gx - x, gy - y) <= _DIST
    return False, False


def to_uis1(action: Action, w: float, h: float) -> dict:
    """One of our actions as UI-S1 writes a model's action (pixels of a ``w`` x ``h`` screen)."""
    a: Any = action
    if isinstance(action, (Click, LongPress)):
        return {"action": action.kind, "coordinate": [a.x * w, a.y * h]}
    if isinstance(action, Swipe):
        return {"action": "swipe", "coordinate": [a.x1 * w, a.y1 * h], "coordinate2": [a.x2 * w, a.y2 * h]}
    if isinstance(action, Scroll):  # the finger moves against the scroll
        dx, dy = {"up": (0, 0.3), "down": (0, -0.3), "left": (0.3, 0), "right": (-0.3, 0)}[action.direction]
        return {"action": "swipe", "coordinate": [0.5 * w, 0.5 * h], "coordinate2": [(0.5 + dx) * w, (0.5 + dy) * h]}
    if isinstance(action, Type):
        return {"action": "type", "text": action.text}
    if isinstance(action, Answer):
        return {"action": "answer", "text": action.text}
    if isinstance(action, OpenApp):
        return {"action": "open", "text": action.app}
    if isinstance(action, NavigateBack):
        return {"action": "system_button", "button": "Back"}
    if isinstance(action, NavigateHome):
        return {"action": "system_button", "button": "Home"}
    if isinstance(action, Key):
        if action.key.lower() in ("enter", "back", "home", "menu"):
            return {"action": "system_button", "button": action.key}
        return {"action": "key", "text": action.key}
    if isinstance(action, Wait):
        return {"action": "wait", "time": action.seconds}
    if isinstance(action, Finish):
        return {"action": "terminate", "status": action.status}
    raise ValueError(f"UI-S1 has no {action.kind} action")


def truth_kind(truth: dict, target: StepTarget) -> str:
    """The row a step counts under: UI-S1's action name, swipes split into vertical and horizontal."""
    k = str(truth.get("action"))
    if k == "swipe":
        d = target.finger_direction or "up"
        return "swipe (vertical)" if d in ("up", "down") else "swipe (horizontal)"
    return k


def _clip(v: float) -> float:
    return min(1.0, max(0.0, v))


def probes(target: StepTarget, rng: random.Random) -> list[Action]:
    """The actions both matchers are asked about at one recorded step: for taps the recorded point,
    each candidate box's centre, a point inside its 1.2x enlargement but outside the box, one just
    outside the enlargement, points 0.03 and 0.05 from the recorded point, two random points and the
    other tap kind; for swipes the four finger directions; for buttons back, home and Enter; for texts
    the text, a part, a longer text, a typo, another text and an empty one; and on every step a wait
    and a finish (kind mismatches, mostly)."""
    out: list[Action] = [Wait(1.0), Finish("success")]
    k = target.kind
    if k in ("click", "long_press"):
        cls = Click if k == "click" else LongPress
        pts: list[tuple[float, float]] = []
        if target.point is not None:
            x, y = target.point
            pts += [(x, y), (x + 0.03, y), (x, y - 0.03), (x - 0.05, y), (x, y + 0.05)]
        for x0, y0, x1, y1 in target.boxes:
            bw = x1 - x0
            cy = (y0 + y1) / 2
            pts += [((x0 + x1) / 2, cy), (x1 + 0.08 * bw, cy), (x1 + 0.12 * bw + 0.002, cy)]
        pts += [(rng.random(), rng.random()) for _ in range(2)]
        out += [cls(_clip(x), _clip(y)) for x, y in pts]
        if target.point is not None:
            out.append((LongPress if k == "click" else Click)(*target.point))
    elif k in ("swipe", "scroll"):
        out += [Swipe(0.5, 0.75, 0.5, 0.25), Swipe(0.5, 0.25, 0.5, 0.75), Swipe(0.75, 0.5, 0.25, 0.5),
                Swipe(0.25, 0.5, 0.75, 0.5)]
    elif target.button is not None or k in ("back", "home"):
        out += [NavigateBack(), NavigateHome(), Key("Enter"), Click(0.5, 0.5)]
    elif k in ("type", "answer", "key", "open_app"):
        text = target.text or ""
        other = "zzz unrelated"
        typo = text[:-1] + ("x" if not text.endswith("x") else "y") if text else "x"
        texts = [text, text[: max(1, len(text) // 2)], text + " now", typo, other, ""]
        out += [(OpenApp(t) if k == "open_app" else Type(t)) for t in texts if t or k != "open_app"]
        out.append(Click(0.5, 0.5))
    elif k == "finish":
        out += [Finish("failure")]
    return out


@dataclass
class ParityReport:
    """Agreement of one of our configs with the reference, per kind (probes and agreeing probes), and
    each disagreement's reason."""

    probes: Counter = field(default_factory=Counter)
    agree: Counter = field(default_factory=Counter)
    reasons: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    examples: dict[str, list] = field(default_factory=lambda: defaultdict(list))

    def rate(self, kind: str) -> float:
        return self.agree[kind] / self.probes[kind] if self.probes[kind] else float("nan")

    def overall(self) -> float:
        n = sum(self.probes.values())
        return sum(self.agree.values()) / n if n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        per = {k: {"probes": self.probes[k], "agree": round(self.rate(k), 5)} for k in sorted(self.probes)}
        swipes = [k for k in self.probes if k.startswith("swipe")]
        if swipes:  # both axes together (not counted twice in overall)
            n = sum(self.probes[k] for k in swipes)
            per["swipe (all)"] = {"probes": n, "agree": round(sum(self.agree[k] for k in swipes) / n, 5)}
        return {"overall": round(self.overall(), 5),
                "per_kind": per,
                "reasons": {k: dict(v) for k, v in sorted(self.reasons.items())}}


def disagreement_reason(kind: str, pred: Action, target: StepTarget, ours: tuple[bool, bool],
                        ref: tuple[bool, bool], config: MatchConfig, truth: dict | None = None) -> str:
    """Why our verdict and the reference's differ at one probe (a named, documented cause)."""
    if kind in ("click", "long_press") and isinstance(pred, (Click, LongPress)):
        if target.boxes and "candidate_bbox" not in (truth or {}):
            return "tap: the record's bbox is a candidate box here; UI-S1's matcher reads candidate_bbox only"
        for x0, y0, x1, y1 in target.boxes:
            cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * _ENLARGE / 2, (y1 - y0) * _ENLARGE / 2
            edges = (abs(pred.x - (cx - hw)), abs(pred.x - (cx + hw)), abs(pred.y - (cy - hh)), abs(pred.y - (cy + hh)))
            if min(edges) < 1e-6:
                return "tap on the edge of an enlarged box: floating-point rounding decides"
        if ref == (True, True) and ours == (True, False):
            return "tap inside a candidate box but beyond 0.04 of the point (the boxes not read)"
    if kind == "swipe (horizontal)" and config.swipe_rule == "convention":
        return "horizontal swipe: UI-S1 takes the recorded scroll direction as the finger's on this axis"
    if kind in ("type", "open", "answer", "key"):
        text = getattr(pred, "text", getattr(pred, "app", ""))
        if not str(text).strip():
            return "empty text: inside every text for UI-S1, a match only for an empty text here"
        return "text: a difflib ratio >= 0.8 also matches here (text_rule either)"
    if kind == "system_button" and ours[0] != ref[0]:
        return "system button: kind credit"
    if kind in ("click", "long_press") and not target.boxes and target.point is not None:
        return "tap: a coordinate past the screen edge, clamped here"
    if kind == "terminate":
        return "finish status compared here"
    return "other"


def compare(records: Iterable[tuple[Step, dict]], configs: dict[str, MatchConfig], *, seed: int = 0,
            fix_boxes: bool = True, point_only: bool = False) -> dict[str, ParityReport]:
    """Ask the reference and each of ``configs`` about :func:`probes` at every ``(imported step, raw
    truth)``; ``point_only``: also a ``point only`` row, our default matcher on each step's point
    alone (what the import gave before it kept candidate boxes)."""
    rng = random.Random(seed)
    reports = {name: ParityReport() for name in configs}
    if point_only:
        reports["point only"] = ParityReport()
    for step, truth in records:
        target = step_target(step)
        w, h = step.observation.size
        kind = truth_kind(truth, target)
        for pred in probes(target, rng):
            try:
                ref = uis1_reference(to_uis1(pred, w, h), truth, w, h, fix_boxes=fix_boxes)
            except TypeError:
                ref = ("crash", "crash")  # type: ignore[assignment]
            runs = dict(configs)
            if point_only:
                runs["point only"] = MatchConfig()
            for name, cfg in runs.items():
                t = target if name != "point only" else StepTarget(target.kind, point=target.point, text=target.text,
                                                                    direction=target.direction,
                                                                    convention=target.convention,
                                                                    button=target.button, status=target.status)
                if name == "point only" and t.point is None and t.kind in ("click", "long_press"):
                    t = target
                r = match_action(pred, t, size=(w, h), config=cfg)
                ours = (r.kind_match, r.matched and r.kind_match)
                rep = reports[name]
                rep.probes[kind] += 1
                if ours == tuple(ref):
                    rep.agree[kind] += 1
                else:
                    why = "UI-S1 crashes" if ref[0] == "crash" else disagreement_reason(kind, pred, target, ours,
                                                                                         ref, cfg, truth)
                    rep.reasons[kind][why] += 1
                    if len(rep.examples[kind]) < 3:
                        rep.examples[kind].append({"pred": pred.to_dict(), "truth": truth, "ours": ours,
                                                   "uis1": list(ref)})
    return reports


def pair_records(trajectories: Sequence[Any], lines: Sequence[dict]) -> list[tuple[Step, dict]]:
    """``(imported step, its raw truth)`` pairs: each step's ``check_options``, else its ``action_content``."""
    out = []
    if len(trajectories) != len(lines):
        raise ValueError(f"{len(trajectories)} imported episodes for {len(lines)} lines")
    for t, d in zip(trajectories, lines):
        for st, raw in zip(t.steps, d["steps"]):
            out.append((st, raw.get("check_options") or raw["action_content"]))
    return out
