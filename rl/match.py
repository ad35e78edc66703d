"""Does the policy's action do what a recorded step did? The matcher of semi-online RL, SOP and the
offline metrics.

The truth is a :class:`~guiagent.types.StepTarget` (kind, any number of candidate boxes, the point,
text, direction with the source's swipe convention, system button, finish status), built by the
importers from what a source records and stored in the step's metadata; :func:`step_target` reads it
back (or derives it from the recorded action and a live step's ``target_box``). :func:`match_action`
reads only the target, never a source's raw fields.

    >>> from guiagent.types import Click, StepTarget
    >>> t = StepTarget("click", boxes=((0.1, 0.1, 0.2, 0.2), (0.0, 0.0, 0.5, 0.5)), point=(0.15, 0.15))
    >>> match_action(Click(0.4, 0.4), t, size=(1080, 2400)).matched     # inside the second box
    True

Rules (:class:`MatchConfig`; ``MatchConfig.preset("uis1")`` reproduces UI-S1's reference matcher,
``check_response_match``, with the deviations named in ``docs/training.md``, "Recorded data"):

- a tap or long press of the same kind matches inside any candidate box enlarged ``box_enlarge``
  (1.2) about its centre, or within ``point_tolerance`` (0.04, normalised) of the recorded point;
- typed text, app names, answers: ``text_rule`` (``containment``: casefolded, stripped, one inside
  the other, UI-S1's rule; ``similarity``: a ``difflib`` ratio >= ``text_threshold``; ``either``,
  the default; ``exact``);
- swipes and scrolls (one kind) by direction: the default reads the target's direction by its
  convention (a ``scroll`` direction is the content's, the finger moves the other way); UI-S1's
  rule takes the written direction and flips its vertical axis only;
- system buttons (back, home, Enter...): another button still has the right kind (``button_kind``);
- finish: the status must agree (``finish_status``; UI-S1 ignores it); wait, back, home: the kind.

Element actions (``ClickElement``...) are matched by element, on the screen's marks (the table the
policy saw, which in a replay is the recorded step's): by id when the recorded step named an element
of that table too (``StepTarget.element``; the same id, or a mark with the same box, matches); else by
box, the mark's box holding the recorded point (a tap anywhere on the element the recording tapped),
or else the point action on the mark's centre compared as any tap is (:func:`resolve_pred`). A tap at
a point matches a recorded element action when it lands inside that element's box.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Literal, Sequence

from guiagent.types import (
    STEP_TARGET_KEY,
    Action,
    ClickElement,
    LongPressElement,
    Mark,
    ParseError,
    Scroll,
    Step,
    StepTarget,
    Swipe,
    TypeElement,
    resolve_element,
)

__all__ = [
    "MatchConfig",
    "MATCH_PRESETS",
    "MatchResult",
    "match_action",
    "step_target",
    "target_from_action",
    "resolve_pred",
    "text_similarity",
    "content_direction",
    "finger_direction",
    "SYSTEM_BUTTONS",
    "uis1_step_reward",
]

#: key names that are system buttons (UI-S1's ``system_button``; AndroidControl's navigate actions)
SYSTEM_BUTTONS = frozenset({"back", "home", "enter", "menu"})
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
_FLIP_VERTICAL = {"up": "down", "down": "up", "left": "left", "right": "right"}
_POINT_KINDS = frozenset({"click", "long_press", "double_click", "right_click", "hover"})
_TEXT_RULES = ("either", "containment", "similarity", "exact")


@dataclass(frozen=True)
class MatchConfig:
    """The rules of :func:`match_action`. Defaults: UI-S1's tolerances with its quirks corrected;
    ``MatchConfig.preset("uis1")``: UI-S1's reference matcher."""

    point_tolerance: float = 0.04
    """largest distance from the policy's tap to the recorded point, normalised (UI-S1: 0.04)"""
    point_tolerance_px: float | None = None
    """a distance in screen pixels instead (normalised coordinates times the screen size)"""
    box_enlarge: float = 1.2
    """candidate boxes are scaled about their centres by this factor before the inside test (UI-S1: 1.2)"""
    text_rule: Literal["either", "containment", "similarity", "exact"] = "either"
    """typed text, app names, answers: containment (casefolded and stripped, one inside the other: UI-S1),
    similarity (difflib ratio >= text_threshold), either of the two, or exact (after casefolding)"""
    text_threshold: float = 0.8
    """the smallest difflib ratio that counts as the same text (similarity, either)"""
    button_kind: bool = True
    """a system button (back, home, Enter...) other than the recorded one still has the right kind
    (kind credit: 0.55 instead of 0.19 with UI-S1's weights); off: each button is a kind of its own"""
    finish_status: bool = True
    """a finish must have the recorded status (success or failure); off: any finish matches (UI-S1)"""
    swipe_rule: Literal["convention", "uis1"] = "convention"
    """convention: the recorded direction is read by the source's convention (a scroll direction is the
    content's, the finger moves the other way); uis1: the written direction with its vertical axis flipped
    is the finger's (UI-S1 flips up/down only)"""
    uis1_kinds: bool = False
    """UI-S1's kind table: a recorded type, answer or key wants a typed text; a finish any finish"""
    empty_text: bool = False
    """an empty text lies inside every text (UI-S1's containment); off: an empty text matches only an
    empty one"""

    def __post_init__(self) -> None:
        if self.point_tolerance < 0 or (self.point_tolerance_px is not None and self.point_tolerance_px < 0):
            raise ValueError("point tolerances must be >= 0")
        if self.box_enlarge <= 0:
            raise ValueError("box_enlarge must be > 0")
        if not 0.0 <= self.text_threshold <= 1.0:
            raise ValueError("text_threshold must lie in [0, 1]")
        if self.text_rule not in _TEXT_RULES:
            raise ValueError(f"text_rule must be one of {_TEXT_RULES}, got {self.text_rule!r}")
        if self.swipe_rule not in ("convention", "uis1"):
            raise ValueError(f"swipe_rule must be convention or uis1, got {self.swipe_rule!r}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "MatchConfig":
        """A named rule set (:data:`MATCH_PRESETS`), optionally with some fields overridden."""
        if name not in MATCH_PRESETS:
            raise ValueError(f"unknown match preset {name!r}; known: {', '.join(MATCH_PRESETS)}")
        return replace(MATCH_PRESETS[name], **overrides)

    def name(self) -> str:
        """The preset this config equals, else ``custom``."""
        return next((k for k, v in MATCH_PRESETS.items() if v == self), "custom")


#: ``default``: UI-S1's tolerances, its quirks corrected; ``uis1``: UI-S1's ``check_response_match``
#: (text by containment, empty text included; vertical-only swipe flip; terminate status ignored;
#: type/answer/key truths want a typed text; system buttons by kind). Its box bug (pixel boxes against
#: normalised taps when a step lists several boxes) and its crash (an ``open`` truth with exactly four
#: boxes) are not reproduced: boxes are always normalised.
MATCH_PRESETS: dict[str, MatchConfig] = {
    "default": MatchConfig(),
    "uis1": MatchConfig(text_rule="containment", finish_status=False, swipe_rule="uis1", uis1_kinds=True,
                        empty_text=True),
}


@dataclass(frozen=True)
class MatchResult:
    """How the policy's action compares with the recorded step.

    ``kind_match``: the same kind of action (scroll and swipe are one kind; system buttons one with
    ``button_kind``); ``matched``: within the tolerances (what the episode goes on with; UI-S1's
    "extract match"); ``exact``: the same action up to normalisation (identical text, the same point
    within a pixel, the same direction and kind); ``reason``: one line.
    """

    matched: bool
    kind_match: bool
    exact: bool
    reason: str
    distance: float | None = None
    """point actions: the normalised distance from the policy's point to the target (0 inside a
    candidate box or within the point tolerance, else to the nearest enlarged box's edge, or to the
    recorded point without a box)"""


_WS = re.compile(r"\s+")


def _norm_text(text: Any) -> str:
    return _WS.sub(" ", str(text).casefold()).strip()


def text_similarity(a: str, b: str) -> float:
    """``difflib`` ratio of the casefolded, whitespace-collapsed texts (1.0 when both are empty).

    difflib (standard library) is enough for the short strings compared here.
    """
    a, b = _norm_text(a), _norm_text(b)
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b).ratio()


def _text_match(pred: Any, gold: Any, cfg: MatchConfig) -> tuple[bool, bool, str]:
    p, g = _norm_text(pred or ""), _norm_text(gold or "")
    empty_ok = cfg.empty_text or (bool(p) and bool(g)) or p == g
    contained = empty_ok and (p in g or g in p)
    if cfg.text_rule == "exact":
        return p == g, p == g, "same text" if p == g else "different text"
    if cfg.text_rule == "containment":
        return contained, p == g, "one text inside the other" if contained else "neither text inside the other"
    ratio = text_similarity(p, g)
    ok = ratio >= cfg.text_threshold or (cfg.text_rule == "either" and contained)
    return ok, p == g, f"text similarity {ratio:.2f}{' (contained)' if contained else ''}"


def finger_direction(action: Action) -> str | None:
    """Where the finger moves for a swipe (the larger of its horizontal and vertical moves; a tie, a
    still finger included, counts as vertical) or a scroll (against its direction)."""
    if isinstance(action, Scroll):
        return _OPPOSITE[action.direction]
    if isinstance(action, Swipe):
        return _path_direction(action.x1, action.y1, action.x2, action.y2)
    return None


def _path_direction(x1: float, y1: float, x2: float, y2: float) -> str:
    dx, dy = x2 - x1, y2 - y1
    return ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")


def content_direction(action: Action) -> str | None:
    """Which way a scroll or swipe reveals content, in :class:`~guiagent.types.Scroll`'s terms.

    A swipe whose finger moves up reveals what lies below (``down``).
    """
    f = finger_direction(action)
    return None if f is None else _OPPOSITE[f]


def _button(action: Any) -> str | None:
    """The system button an action presses (``back``, ``home``, ``enter``...), else ``None``."""
    if action.kind in ("back", "home"):
        return action.kind
    if action.kind == "key":
        name = _norm_text(action.key)
        return name if name in SYSTEM_BUTTONS else None
    return None


# -- targets ----------------------------------------------------------------------------------


def target_from_action(action: Action, *, boxes: Sequence[Sequence[float]] = ()) -> StepTarget:
    """The target a recorded action stands for (a live recording, a source without more to say).

    Swipes keep their finger path and its direction (convention ``finger``); scrolls their direction
    (convention ``scroll``). Element actions have no point of their own: resolve them first
    (:func:`step_target` does, with the step's marks).
    """
    k = action.kind
    a: Any = action
    if k in _POINT_KINDS:
        return StepTarget(k, boxes=tuple(boxes), point=(a.x, a.y))
    if k == "type":
        return StepTarget(k, boxes=tuple(boxes), text=a.text, point=None if a.x is None else (a.x, a.y))
    if k == "scroll":
        return StepTarget(k, direction=a.direction, convention="scroll",
                          point=None if a.x is None else (a.x, a.y))
    if k == "swipe":
        return StepTarget(k, point=(a.x1, a.y1), point2=(a.x2, a.y2),
                          direction=_path_direction(a.x1, a.y1, a.x2, a.y2), convention="finger")
    if k == "drag":
        return StepTarget(k, point=(a.x1, a.y1), point2=(a.x2, a.y2))
    if k == "key":
        name = _norm_text(a.key)
        return StepTarget(k, text=a.key, button=name if name in SYSTEM_BUTTONS else None)
    if k in ("back", "home"):
        return StepTarget(k, button=k)
    if k == "open_app":
        return StepTarget(k, text=a.app)
    if k == "answer":
        return StepTarget(k, text=a.text)
    if k == "finish":
        return StepTarget(k, status=a.status)
    if k in ("click_element", "long_press_element", "type_element"):
        raise ValueError(f"a recorded {k} needs the screen's marks to become a target")
    return StepTarget(k)


def step_target(step: Step) -> StepTarget:
    """The target of a recorded step: its ``metadata["target"]`` (importers write one), else one derived
    from its action (with the live recorder's ``target_box``; an element action resolved on the
    step's marks, its mark's box the target box). ``ValueError`` names a malformed target."""
    meta = step.metadata or {}
    raw = meta.get(STEP_TARGET_KEY)
    if raw is not None:
        try:
            return StepTarget.from_dict(raw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"step {step.index}: bad target in its metadata ({e})") from None
    if step.action is None:
        raise ValueError(f"step {step.index} has no action and no target to compare with")
    box = meta.get("target_box")
    if box is not None and not (isinstance(box, (list, tuple)) and len(box) == 4):
        raise ValueError(f"step {step.index}: target_box must be [x0, y0, x1, y1], got {box!r:.80}")
    action = step.action
    boxes: tuple = () if box is None else (tuple(box),)
    element = None
    if isinstance(action, (ClickElement, LongPressElement, TypeElement)):
        marks = step.observation.marks
        mark = next((m for m in marks or () if m.id == action.element), None)
        if mark is None:
            raise ValueError(f"step {step.index}: element {action.element} is not among the screen's marks")
        action, boxes, element = resolve_element(action, marks), (mark.box,), mark.id
    try:
        target = target_from_action(action, boxes=boxes)
    except (TypeError, ValueError) as e:
        raise ValueError(f"step {step.index}: {e}") from None
    return target if element is None else replace(target, element=element)


def resolve_pred(pred: Action, marks: Sequence[Mark] | None) -> Action | None:
    """The policy's action as the matcher compares it: an element action becomes the point action on
    its mark (``None`` when the screen has no such mark). The seam for element matching."""
    if isinstance(pred, (ClickElement, LongPressElement, TypeElement)):
        try:
            return resolve_element(pred, tuple(marks) if marks is not None else None)
        except ValueError:
            return None
    return pred


# -- matching ---------------------------------------------------------------------------------


def _enlarged(box: Sequence[float], enlarge: float) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = box
    cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * enlarge / 2, (y1 - y0) * enlarge / 2
    return cx - hw, cy - hh, cx + hw, cy + hh


def _box_gap(x: float, y: float, box: tuple[float, float, float, float]) -> float:
    x0, y0, x1, y1 = box
    return math.hypot(max(0.0, x0 - x, x - x1), max(0.0, y0 - y, y - y1))


def _point_match(px: float, py: float, t: StepTarget, size: tuple[int, int], cfg: MatchConfig) -> MatchResult:
    w, h = size
    boxes = [_enlarged(b, cfg.box_enlarge) for b in t.boxes]
    exact = t.point is not None and math.hypot((px - t.point[0]) * w, (py - t.point[1]) * h) <= 1.0
    for i, b in enumerate(boxes):
        if b[0] <= px <= b[2] and b[1] <= py <= b[3]:
            which = "the target box" if len(boxes) == 1 else f"candidate box {i + 1} of {len(boxes)}"
            return MatchResult(True, True, exact, f"point inside {which}", 0.0)
    if t.point is None:
        if not boxes:
            return MatchResult(False, True, False, "the recorded step has no point or box to compare with")
        gap = min(_box_gap(px, py, b) for b in boxes)
        return MatchResult(False, True, False, f"point outside the {len(boxes)} candidate box(es)", gap)
    gx, gy = t.point
    if cfg.point_tolerance_px is not None:
        d, unit = math.hypot((px - gx) * w, (py - gy) * h), "px"
        close = d <= cfg.point_tolerance_px
    else:
        d, unit = math.hypot(px - gx, py - gy), "(normalised)"
        close = d <= cfg.point_tolerance
    gap = math.hypot(px - gx, py - gy) if not boxes else min(_box_gap(px, py, b) for b in boxes)
    return MatchResult(close, True, exact and close,
                       f"point distance {d:.3f} {unit}" + (", outside the target box" if boxes else ""),
                       0.0 if close else gap)


def _uis1_kind(kind: str, button: str | None) -> str:
    """UI-S1's action kind of one of ours (a target's or a prediction's)."""
    if button is not None:
        return "system_button"
    return {"scroll": "swipe", "open_app": "open", "finish": "terminate"}.get(kind, kind)


def match_action(
    pred: Action | ParseError | None,
    target: StepTarget | Action,
    *,
    size: tuple[int, int],
    target_box: Sequence[float] | None = None,
    config: MatchConfig = MatchConfig(),
    marks: Sequence[Mark] | None = None,
) -> MatchResult:
    """Compare the policy's action ``pred`` with a recorded step's ``target`` on a screen of ``size`` pixels.

    ``target``: a :class:`~guiagent.types.StepTarget` (:func:`step_target` of the recorded step), or a
    recorded action (with ``target_box``, a normalised box, when known). ``marks``: the screen's
    numbered elements, for element actions. A :class:`~guiagent.types.ParseError` (or ``None``) never
    matches.
    """
    if not isinstance(target, StepTarget):
        target = target_from_action(target, boxes=() if target_box is None else (tuple(target_box),))
    if pred is None or isinstance(pred, ParseError):
        return MatchResult(False, False, False, "no action (the reply did not parse)")
    resolved = resolve_pred(pred, marks)
    if resolved is None:
        return MatchResult(False, False, False, f"{pred.kind} names no element of this screen")
    p: Any = resolved
    t, cfg = target, config
    tk = t.kind
    t_button = t.button if t.button is not None else (tk if tk in ("back", "home") else None)
    p_button = _button(p)

    # -- kind -----------------------------------------------------------------------------
    if cfg.uis1_kinds:
        want, got = _uis1_kind(tk, t_button), _uis1_kind(p.kind, p_button)
        if want in ("type", "answer", "key"):
            want = "type"  # UI-S1 compares a recorded type, answer or key with a typed text only
        same_kind = want == got
    else:
        fam = {"swipe": "scroll"}
        if t_button is not None and p_button is not None:
            same_kind = cfg.button_kind or t_button == p_button
        else:
            same_kind = fam.get(p.kind, p.kind) == fam.get(tk, tk)
    if not same_kind:
        return MatchResult(False, False, False, f"kind {p.kind} != recorded {tk}")

    # -- the arguments ----------------------------------------------------------------------
    if t_button is not None and p_button is not None:
        same = t_button == p_button
        return MatchResult(same, True, same, f"button {p_button} vs recorded {t_button}")
    if tk in _POINT_KINDS:
        by_element = _element_match(pred, marks, t)
        return by_element if by_element is not None else _point_match(p.x, p.y, t, size, cfg)
    if tk in ("scroll", "swipe"):
        return _swipe_match(p, t, cfg)
    if tk == "drag":
        return _drag_match(p, t, size, cfg)
    if tk == "key" and p.kind == "key":  # key names are names, not text to approximate
        same = _norm_text(p.key) == _norm_text(t.text or "")
        return MatchResult(same, True, same, f"key {p.key!r} vs {t.text!r}")
    if tk in ("type", "answer", "open_app", "key"):
        got_text = p.app if p.kind == "open_app" else p.key if p.kind == "key" else p.text
        ok, exact, why = _text_match(got_text, t.text, cfg)
        return MatchResult(ok, True, exact, why)
    if tk == "finish":
        if not cfg.finish_status:
            return MatchResult(True, True, p.status == (t.status or "success"), "finish (status not compared)")
        same = p.status == (t.status or "success")
        return MatchResult(same, True, same, f"status {p.status} vs {t.status or 'success'}")
    # wait, and any other kind without arguments: the kind is the whole action
    return MatchResult(True, True, True, f"same kind {tk}")


def _element_match(pred: Action, marks: Sequence[Mark] | None, t: StepTarget) -> MatchResult | None:
    """An element action against a tap target, by element: ``None`` when geometry decides instead (a
    point prediction, or a target with neither an element id nor a lone point)."""
    if not isinstance(pred, (ClickElement, LongPressElement)):
        return None
    mark = next((m for m in marks or () if m.id == pred.element), None)
    if mark is None:
        return None
    if t.element is not None:  # both sides name elements of the same table
        same = pred.element == t.element or mark.box in t.boxes
        return MatchResult(same, True, same, f"element {pred.element} vs recorded element {t.element}",
                           0.0 if same else _box_gap(*mark.center, t.boxes[0]) if t.boxes else 1.0)
    if t.point is not None and not t.boxes and mark.contains(*t.point):
        return MatchResult(True, True, False, f"element {pred.element}'s box holds the recorded point", 0.0)
    return None


def _swipe_match(p: Any, t: StepTarget, cfg: MatchConfig) -> MatchResult:
    got = finger_direction(p)
    if t.direction is not None:
        written = t.direction
    elif t.point is not None and t.point2 is not None:
        written = _path_direction(*t.point, *t.point2)
        t = replace(t, direction=written, convention="finger")
    else:
        return MatchResult(False, True, False, "the recorded step has no direction to compare with")
    want = _FLIP_VERTICAL[written] if cfg.swipe_rule == "uis1" else t.finger_direction
    same = got == want
    return MatchResult(same, True, same and p.kind == t.kind, f"finger moves {got}, recorded {want}")


def _drag_match(p: Any, t: StepTarget, size: tuple[int, int], cfg: MatchConfig) -> MatchResult:
    if t.point is None or t.point2 is None:
        return MatchResult(False, True, False, "the recorded drag has no end points")
    w, h = size

    def close(x: float, y: float, g: tuple[float, float]) -> tuple[bool, float]:
        if cfg.point_tolerance_px is not None:
            d = math.hypot((x - g[0]) * w, (y - g[1]) * h)
            return d <= cfg.point_tolerance_px, d
        d = math.hypot(x - g[0], y - g[1])
        return d <= cfg.point_tolerance, d

    c1, d1 = close(p.x1, p.y1, t.point)
    c2, d2 = close(p.x2, p.y2, t.point2)
    return MatchResult(c1 and c2, True, c1 and c2 and max(d1, d2) == 0, f"end point distances {d1:.3f}, {d2:.3f}")


# -- UI-S1's step reward ----------------------------------------------------------------------


def uis1_step_reward(format_ok: bool, parsed: bool, result: MatchResult) -> float:
    """UI-S1's step score: ``0.1 · format + 0.9 · action`` with action 1.0 (matched), 0.5 (right kind),
    0.1 (parsed, other kind), 0 (not parsed). ``format_ok``: the reply has a thought (UI-S1's check).

    The trainer computes the same from tensors (:func:`rl.advantages.semi_online_step_rewards` with
    ``SemiOnlineRewardConfig(format_requires_thought=True)``).

    >>> uis1_step_reward(True, True, MatchResult(False, True, False, ""))
    0.55
    """
    action = 0.0 if not parsed else 1.0 if (result.matched and result.kind_match) else \
        0.5 if result.kind_match else 0.1
    return round(0.1 * float(format_ok) + 0.9 * action, 10)
