"""The JSONL layouts of UI-S1's reference code (one episode a line).

Schema (https://github.com/X-PLUG/MobileAgent/tree/main/UI-S1, ``datasets/``: the training example
``android_control_train_example.jsonl`` and the evaluation file ``android_control_evaluation_std.jsonl``;
the matcher ``verl/utils/reward_score/gui_utils/utils.py``)::

    {"goal": str, "is_successful": bool, "episode_id": int (evaluation file),
     "steps": [{"action_content": {"action": "click", "coordinate": [x, y], "bbox": [x0, y0, x1, y1]},
                "screenshot": "/path/0_0.png", "thought": str (optional),
                "step_instruction": str (evaluation file: AndroidControl's low-level instruction),
                "check_options": {"action": "click", "candidate_bbox": [[x0, y0, x1, y1], ...],
                                  "coordinate": [x, y]} (evaluation file: what the matcher compares with)},
               ...]}

Coordinates are pixels of the screenshot. Actions: ``click`` / ``long_press`` (``coordinate``; ``bbox``
or ``candidate_bbox``: one box or a list), ``swipe`` (``coordinate`` and ``coordinate2``, or
``direction``), ``type`` / ``answer`` / ``key`` (``text``), ``open`` (``text``: the app),
``system_button`` (``button``: Back, Home, Enter, Menu), ``wait`` (``time``), ``terminate`` (``status``).

Each step becomes the recorded action (``action_content``) and a typed
:class:`~guiagent.types.StepTarget` in its metadata (from ``check_options`` when the step has them,
else from ``action_content``), with ``step_instruction`` and the ``episode_id``.

Swipe conventions (``swipe_convention``): the two files write a swipe's coordinates differently. In
the training example they run the way the view scrolls (AndroidControl's "scroll down" is
``[540, 600] -> [540, 1800]``; UI-S1's matcher flips it back before comparing with the model's
finger): convention ``scroll``, the finger path imported is ``coordinate2 -> coordinate``. In the
evaluation file ``action_content`` is the finger path itself (``[540, 1800] -> [540, 600]`` for a
"scroll down", whose instruction says "swipe up"): convention ``finger``. ``auto`` (the default)
takes ``finger`` for steps with ``check_options`` and ``scroll`` for steps without. A
``check_options`` ``direction`` is AndroidControl's scroll direction (convention ``scroll``). The
import checks every swipe against its step instruction and says so where they disagree (the
evaluation file's left/right finger paths go against both their instructions and their
``check_options``: see docs/training.md, "Recorded data").

Screenshots are read only from inside the JSONL file's folder (and ``images_dir``): a path is
looked up under that folder (an absolute one as written when it lies inside the folder, else with its
leading ``/`` dropped), then as ``images_dir/<file name>``. A path that leads outside its folder
(``..``), a symbolic link (to anywhere: no link below the folder is followed), something not a regular
file, or a file over :data:`~guiagent.datasets._common.MAX_SCREENSHOT_BYTES` (64 MiB, judged by its size before
it is read) is refused with one line; every screenshot is decoded whole, so a damaged one is refused
too, naming its line and step. The published files ship no screenshots: ``placeholders`` (``WxH`` or
``auto``) stands a blank screenshot of that size in for each missing one (``auto``: the size the
episode's coordinates imply, :func:`infer_screen`); each such step has metadata ``placeholder: true``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from guiagent.datasets._common import (
    DatasetError,
    EpisodeBudget,
    ImportNotes,
    boxes_unit,
    image_size,
    iter_files,
    iter_lines,
    json_error,
    json_record,
    lies_inside,
    parse_size,
    placeholder_png,
    read_inside,
    unit,
)
from guiagent.types import (
    STEP_TARGET_KEY,
    Action,
    Answer,
    Click,
    Finish,
    Key,
    LongPress,
    NavigateBack,
    NavigateHome,
    Observation,
    OpenApp,
    Scroll,
    Step,
    StepTarget,
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
    Wait,
)

__all__ = ["read_uis1", "uis1_action", "uis1_target", "infer_screen", "SUITE", "KNOWN_SCREENS"]

SUITE = "uis1"
#: AndroidControl's two screen sizes (both occur in UI-S1's evaluation file)
KNOWN_SCREENS = ((1080, 2400), (1440, 3120))
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
_CONVENTIONS = ("auto", "finger", "scroll")


def _s(v: Any, n: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _point(c: Any, w: int, h: int, where: str, what: str) -> tuple[float, float]:
    if not (isinstance(c, (list, tuple)) and len(c) == 2):
        raise DatasetError(f"{where}: {what} must be [x, y], got {_s(c)}")
    return unit(c[0], w, where, f"{what}[0]"), unit(c[1], h, where, f"{what}[1]")


def _text(a: dict, key: str, where: str, kind: str) -> str:
    if key not in a:
        raise DatasetError(f"{where}: {kind} action without {key!r}: {_s(a)}")
    v = a[key]
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise DatasetError(f"{where}: {kind} {key} must be text, got {_s(v)}")
    return str(v)


def _direction(a: dict, where: str) -> str:
    d = a["direction"]
    if not isinstance(d, str) or d.strip().lower() not in _OPPOSITE:
        raise DatasetError(f"{where}: swipe direction must be up, down, left or right, got {_s(d)}")
    return d.strip().lower()


def _path_direction(x1: float, y1: float, x2: float, y2: float) -> str:
    dx, dy = x2 - x1, y2 - y1
    return ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")


def _kind(a: Any, where: str, what: str) -> str:
    if not isinstance(a, dict) or "action" not in a:
        raise DatasetError(f"{where}: {what} must be an object with 'action', got {_s(a)}")
    t = a["action"]
    if not isinstance(t, str):
        raise DatasetError(f"{where}: {what} action must be a name, got {_s(t)}")
    return t


def uis1_action(a: Any, w: int, h: int, where: str, convention: str = "scroll") -> Action:
    """One ``action_content`` as a typed action; a swipe's coordinates read by ``convention``
    (``finger``: they are the finger's path; ``scroll``: they run the way the view scrolls)."""
    t = _kind(a, where, "action_content")
    try:
        if t in ("click", "long_press"):
            x, y = _point(a.get("coordinate"), w, h, where, "coordinate")
            return Click(x, y) if t == "click" else LongPress(x, y)
        if t == "swipe":
            if "direction" in a and "coordinate" not in a:
                d = _direction(a, where)
                return Scroll(d if convention == "scroll" else _OPPOSITE[d])
            x1, y1 = _point(a.get("coordinate"), w, h, where, "coordinate")
            x2, y2 = _point(a.get("coordinate2"), w, h, where, "coordinate2")
            return Swipe(x1, y1, x2, y2) if convention == "finger" else Swipe(x2, y2, x1, y1)
        if t == "type":
            return Type(_text(a, "text", where, t))
        if t == "answer":
            return Answer(_text(a, "text", where, t))
        if t == "key":
            return Key(_text(a, "text", where, t))
        if t == "open":
            return OpenApp(_text(a, "text", where, t))
        if t == "system_button":
            b = _text(a, "button", where, t).strip().lower()
            if b == "back":
                return NavigateBack()
            if b == "home":
                return NavigateHome()
            if b == "enter":
                return Key("Enter")
            if b:
                return Key(b.capitalize())
            raise DatasetError(f"{where}: system_button without a button name")
        if t == "wait":
            secs = a.get("time", 1.0)
            if isinstance(secs, bool) or not isinstance(secs, (int, float)):
                raise DatasetError(f"{where}: wait time must be a number of seconds, got {_s(secs)}")
            return Wait(float(secs))
        if t == "terminate":
            return Finish(_status(a, where))
    except (TypeError, ValueError, OverflowError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: bad {t} action {_s(a)}: {json_error(e)}") from None
    raise DatasetError(f"{where}: unknown action {_s(t)}")


def _status(a: dict, where: str) -> str:
    s = a.get("status", "success")
    if not isinstance(s, str) or s.strip().lower() not in ("success", "successful", "fail", "failed", "failure",
                                                           "infeasible"):
        raise DatasetError(f"{where}: terminate status must be success or failure, got {_s(s)}")
    return "success" if s.strip().lower().startswith("success") else "failure"


def uis1_target(a: Any, w: int, h: int, where: str, convention: str, *, checked: bool) -> StepTarget:
    """What a step asks of an action, from its ``check_options`` (``checked``) or its ``action_content``.

    A ``direction`` is AndroidControl's scroll direction; swipe coordinates read by ``convention``.
    """
    what = "check_options" if checked else "action_content"
    t = _kind(a, where, what)
    try:
        if t in ("click", "long_press"):
            boxes = boxes_unit(a.get("candidate_bbox", a.get("bbox")), w, h, where)
            point = _point(a["coordinate"], w, h, where, "coordinate") if "coordinate" in a else None
            if point is None and not boxes:
                raise DatasetError(f"{where}: {what} {t} has neither a coordinate nor a box")
            return StepTarget(t, boxes=tuple(tuple(b) for b in boxes), point=point)
        if t == "swipe":
            if "direction" in a:  # UI-S1's matcher reads the direction first
                return StepTarget("swipe", direction=_direction(a, where), convention="scroll")
            p1 = _point(a.get("coordinate"), w, h, where, "coordinate")
            p2 = _point(a.get("coordinate2"), w, h, where, "coordinate2")
            finger = (p1, p2) if convention == "finger" else (p2, p1)
            return StepTarget("swipe", point=finger[0], point2=finger[1], direction=_path_direction(*p1, *p2),
                              convention=convention)
        if t in ("type", "answer", "key"):
            return StepTarget(t, text=_text(a, "text", where, t))
        if t == "open":
            boxes = boxes_unit(a.get("candidate_bbox"), w, h, where)
            return StepTarget("open_app", text=_text(a, "text", where, t), boxes=tuple(tuple(b) for b in boxes))
        if t == "system_button":
            b = _text(a, "button", where, t).strip().lower()
            if not b:
                raise DatasetError(f"{where}: system_button without a button name")
            if b in ("back", "home"):
                return StepTarget(b, button=b)
            return StepTarget("key", text=b.capitalize(), button=b)
        if t == "wait":
            return StepTarget("wait")
        if t == "terminate":
            return StepTarget("finish", status=_status(a, where))
    except (TypeError, ValueError, OverflowError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: bad {what} {_s(a)}: {json_error(e)}") from None
    raise DatasetError(f"{where}: unknown action {_s(t)} in {what}")


def infer_screen(steps: list, where: str) -> tuple[int, int]:
    """The screen size an episode's coordinates imply (for placeholders): a swipe at UI-S1's stock
    coordinates names its screen exactly (``(w/2, h/4) <-> (w/2, 3h/4)``, ``(w/4, h/2) <-> (3w/4, h/2)``);
    else the smaller of :data:`KNOWN_SCREENS` that holds every tap point (boxes are left out:
    accessibility bounds reach past the screen)."""
    xs: list[float] = [0.0]
    ys: list[float] = [0.0]
    for s in steps:
        for src in (s.get("action_content"), s.get("check_options")) if isinstance(s, dict) else ():
            if not isinstance(src, dict):
                continue
            pts = [src.get(k) for k in ("coordinate", "coordinate2")]
            pts = [p for p in pts if isinstance(p, (list, tuple)) and len(p) == 2
                   and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)]
            if src.get("action") == "swipe" and len(pts) == 2:
                got = {(float(pts[0][0]), float(pts[0][1])), (float(pts[1][0]), float(pts[1][1]))}
                for w, h in KNOWN_SCREENS:
                    if got in ({(w / 2, h / 4), (w / 2, 3 * h / 4)}, {(w / 4, h / 2), (3 * w / 4, h / 2)}):
                        return w, h
            for p in pts:
                xs.append(float(p[0]))
                ys.append(float(p[1]))
    for w, h in KNOWN_SCREENS:
        if max(xs) <= w * 1.02 and max(ys) <= h * 1.02:
            return w, h
    raise DatasetError(f"{where}: coordinates reach ({max(xs):g}, {max(ys):g}), beyond every known screen "
                       f"({', '.join(f'{w}x{h}' for w, h in KNOWN_SCREENS)}): give --placeholders WxH")


class _Shots:
    """Screenshot bytes by path, or placeholders where a file is missing (and placeholders are on)."""

    def __init__(self, base: Path, images_dir: Path | None, placeholders: str | None, notes: ImportNotes):
        self.base, self.images_dir, self.notes = base, images_dir, notes
        self.auto = placeholders == "auto"
        self.size = None if placeholders in (None, "", "auto") else parse_size(placeholders, "--placeholders")
        self.on = bool(placeholders)

    def get(self, p: Any, where: str, episode_size: Any) -> tuple[bytes, bool]:
        if not isinstance(p, str) or not p or "\x00" in p:
            if self.on and p is None:
                return self._placeholder(where, episode_size), True
            raise DatasetError(f"{where}: screenshot must be a path, got {_s(p)}")
        # (path, the folder it must stay inside): an absolute path as written only where it names a file
        # inside the JSONL's folder (elsewhere it is the recorder's machine, never read here)
        tries = [(Path(p), self.base)] if Path(p).is_absolute() and lies_inside(p, self.base) else []
        tries.append((self.base / p.lstrip("/"), self.base))
        if self.images_dir:
            tries.append((self.images_dir / Path(p).name, self.images_dir))
        for c, root in tries:
            data = read_inside(c, root, where)  # refuses a path or link leading outside, a pipe, a huge file
            if data is not None:
                return data, False
        if self.on:
            return self._placeholder(where, episode_size), True
        raise DatasetError(
            f"{where}: screenshot {_s(p)} not found (tried {', '.join(_s(str(t), 120) for t, _ in tries)}; "
            "pass --images DIR for a folder holding the files, or --placeholders WxH|auto to stand blank "
            "screenshots in)"
        )

    def _placeholder(self, where: str, episode_size: Any) -> bytes:
        w, h = self.size if self.size else episode_size()
        self.notes.placeholders += 1
        return placeholder_png(w, h)


def read_uis1(
    src: str | Path,
    *,
    images_dir: str | Path | None = None,
    placeholders: str | None = None,
    swipe_convention: str = "auto",
    notes: ImportNotes | None = None,
    **_: Any,
) -> Iterator[Trajectory]:
    """Every episode in ``src`` (a ``.jsonl`` file or a folder of them).

    ``placeholders``: ``WxH`` or ``auto`` to stand blank screenshots in for missing files;
    ``swipe_convention``: how ``action_content`` swipe coordinates run (``auto``, ``finger``, ``scroll``);
    ``notes``: receives warnings and the swipe check (:class:`~guiagent.datasets._common.ImportNotes`).
    """
    if swipe_convention not in _CONVENTIONS:
        raise DatasetError(f"swipe convention must be one of {', '.join(_CONVENTIONS)}, got {swipe_convention!r}")
    notes = notes if notes is not None else ImportNotes()
    imgs = Path(images_dir) if images_dir else None
    src = Path(src)
    for path in iter_files(src, ("*.jsonl",)):
        shots = _Shots(path.parent, imgs, placeholders, notes)
        for n, raw in iter_lines(path, src=src):
            if not raw.strip():
                continue
            where = f"{path}: line {n}"
            d = json_record(raw, where)
            if (
                not isinstance(d, dict)
                or not isinstance(d.get("goal"), str)
                or not isinstance(d.get("steps"), list)
                or not d["steps"]
            ):
                raise DatasetError(f"{where}: an episode needs 'goal' (text) and a non-empty 'steps' list")
            yield _episode(d, path, n, where, shots, swipe_convention, notes)
    for line in notes.swipes.warnings(str(src), action_field="action_content",
                                      target_field="the step target (check_options)"):
        notes.warn(line)


def _episode(d: dict, path: Path, n: int, where: str, shots: _Shots, convention: str,
             notes: ImportNotes) -> Trajectory:
    eid = d.get("episode_id")
    if eid is not None and (isinstance(eid, bool) or not isinstance(eid, (int, str))
                            or len(str(eid)) > 200):
        raise DatasetError(f"{where}: episode_id must be a number or a short text, got {_s(eid)}")
    size_cache: list[tuple[int, int]] = []

    def episode_size() -> tuple[int, int]:
        if not size_cache:
            size_cache.append(infer_screen(d["steps"], where))
        return size_cache[0]

    budget = EpisodeBudget(where)
    budget.steps_declared(len(d["steps"]))
    steps = []
    for i, s in enumerate(d["steps"]):
        at = f"{where} step {i}"
        if not isinstance(s, dict):
            raise DatasetError(f"{at}: a step must be an object")
        shot, placeholder = shots.get(s.get("screenshot"), at, episode_size)
        budget.step(shot)
        w, h = image_size(shot, at, decode=not placeholder)  # placeholders are our own blank PNGs
        check = s.get("check_options")
        if check is not None and not isinstance(check, dict):
            raise DatasetError(f"{at}: check_options must be an object, got {_s(check)}")
        conv = convention if convention != "auto" else ("finger" if check is not None else "scroll")
        action = uis1_action(s.get("action_content"), w, h, at, conv)
        target = uis1_target(check if check is not None else s.get("action_content"), w, h, at, conv,
                             checked=check is not None)
        instr = s.get("step_instruction")
        if instr is not None and not isinstance(instr, str):
            raise DatasetError(f"{at}: step_instruction must be text, got {_s(instr)}")
        thought = s.get("thought") or ""
        if not isinstance(thought, str):
            raise DatasetError(f"{at}: thought must be text, got {_s(thought)}")
        meta: dict[str, Any] = {STEP_TARGET_KEY: target.to_dict()}
        if instr:
            meta["step_instruction"] = instr
        if eid is not None:
            meta["episode_id"] = eid
        if placeholder:
            meta["placeholder"] = True
        if target.kind == "swipe":
            finger = _finger(action)
            notes.swipes.add(finger, target.finger_direction, instr or "")
        steps.append(Step(i, Observation(shot, w, h), action, thought=thought, metadata=meta))
    ok = d.get("is_successful", True)
    if not isinstance(ok, bool):
        raise DatasetError(f"{where}: is_successful must be true or false, got {_s(ok)}")
    params = {} if eid is None else {"episode_id": eid}
    spec = TaskSpec(SUITE, f"{path.stem}:{n}", n, d["goal"], max_steps=len(steps), params=params)
    meta_ep: dict[str, Any] = {"source": SUITE, "file": path.name, "line": n}
    if eid is not None:
        meta_ep["episode_id"] = eid
    return Trajectory(f"uis1-{path.stem}-{n}", spec, tuple(steps), success=1.0 if ok else 0.0,
                      agent=f"import:{SUITE}", metadata=meta_ep)


def _finger(action: Action) -> str | None:
    if isinstance(action, Swipe):
        return _path_direction(action.x1, action.y1, action.x2, action.y2)
    if isinstance(action, Scroll):
        return _OPPOSITE[action.direction]
    return None
