"""GUI-Odyssey episodes (one JSON annotation per episode plus a screenshot folder).

Schema (https://github.com/OpenGVLab/GUI-Odyssey, ``introduction.md``): a source
folder holds ``annotations/<episode_id>.json`` and ``screenshots/<file>``; each
annotation has ``episode_id``, ``device_info`` (``w``, ``h``, ...), ``task_info``
(``task``, ``instruction``, ``category``, ``app``, ``meta_task``), ``step_length``
and ``steps``: ``{"step", "screenshot", "action", "info", "ps"}`` with ``action``
one of CLICK, LONG_PRESS, SCROLL, TYPE, COMPLETE, IMPOSSIBLE, HOME, BACK and
coordinates in ``info`` on a [0, 1000] scale (CLICK/LONG_PRESS ``[[x, y]]``,
SCROLL ``[[x1, y1], [x2, y2]]``: the finger path; TYPE: the text; a CLICK whose
info is ``HOME`` / ``BACK`` is that key).

Each step's :class:`~guiagent.types.StepTarget` (metadata ``target``) holds the tap point, the swipe's
path and direction (GUI-Odyssey records the finger's path: convention ``finger``), the text, or the
button; the episode id goes in each step's metadata. ``placeholders`` (``WxH``, or ``auto``: the
annotation's ``device_info`` size) stands blank screenshots in for missing files.

A screenshot is looked up by its file name alone in ``screenshots/`` (or ``images_dir``) and must be a
regular file of at most 64 MiB lying inside the source folder (or ``images_dir``), reached through no
symbolic link; annotations too. Every screenshot is decoded whole: a damaged one is one line naming the
annotation and step. Two annotations with the same ``episode_id`` are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from guiagent.datasets._common import (
    MAX_RECORD_BYTES,
    DatasetError,
    EpisodeBudget,
    ImportNotes,
    check_episode_id,
    image_size,
    json_record,
    parse_size,
    placeholder_png,
    read_inside,
    source_kind,
    unit,
)
from guiagent.types import (
    STEP_TARGET_KEY,
    Action,
    Click,
    Finish,
    LongPress,
    NavigateBack,
    NavigateHome,
    Observation,
    Step,
    StepTarget,
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
)

__all__ = ["read_guiodyssey", "guiodyssey_action", "SUITE"]

SUITE = "guiodyssey"
#: what an episode id from the annotations is written with (``e1`` -> ``guiodyssey-e1``)
ID_PREFIX = f"{SUITE}-"
_SPECIAL = {"HOME": NavigateHome, "BACK": NavigateBack}


def _pt(p: Any, where: str) -> tuple[float, float]:
    if not (isinstance(p, (list, tuple)) and len(p) == 2):
        raise DatasetError(f"{where}: a point must be [x, y] on the 0-1000 scale, got {p!r}")
    return unit(p[0], 1000, where, "x"), unit(p[1], 1000, where, "y")


def guiodyssey_action(action: Any, info: Any, where: str) -> Action:
    """One GUI-Odyssey step's ``action`` and ``info`` as a typed action."""
    a = str(action).upper()
    if a in ("CLICK", "LONG_PRESS"):
        if isinstance(info, str) and info.upper() in _SPECIAL:
            return _SPECIAL[info.upper()]()
        if not (isinstance(info, list) and len(info) == 1):
            raise DatasetError(f"{where}: {a} info must be [[x, y]], got {info!r}")
        x, y = _pt(info[0], where)
        return Click(x, y) if a == "CLICK" else LongPress(x, y)
    if a == "SCROLL":
        if not (isinstance(info, list) and len(info) == 2):
            raise DatasetError(f"{where}: SCROLL info must be [[x1, y1], [x2, y2]], got {info!r}")
        (x1, y1), (x2, y2) = _pt(info[0], where), _pt(info[1], where)
        return Swipe(x1, y1, x2, y2)
    if a == "TYPE":
        if not isinstance(info, str):
            raise DatasetError(f"{where}: TYPE info must be the text, got {info!r}")
        return Type(info)
    if a == "COMPLETE":
        return Finish("success")
    if a == "IMPOSSIBLE":
        return Finish("failure")
    if a in _SPECIAL:
        return _SPECIAL[a]()
    raise DatasetError(f"{where}: unknown action {action!r}")


def guiodyssey_target(action: Action) -> StepTarget:
    """The step target of a GUI-Odyssey action (a SCROLL is the finger's path)."""
    a: Any = action
    if isinstance(action, (Click, LongPress)):
        return StepTarget(action.kind, point=(a.x, a.y))
    if isinstance(action, Swipe):
        dx, dy = a.x2 - a.x1, a.y2 - a.y1
        d = ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")
        return StepTarget("swipe", point=(a.x1, a.y1), point2=(a.x2, a.y2), direction=d, convention="finger")
    if isinstance(action, Type):
        return StepTarget("type", text=action.text)
    if isinstance(action, Finish):
        return StepTarget("finish", status=action.status)
    if isinstance(action, (NavigateBack, NavigateHome)):
        return StepTarget(action.kind, button=action.kind)
    return StepTarget(action.kind)


def _s(v: Any, n: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def read_guiodyssey(
    src: str | Path, *, images_dir: str | Path | None = None, placeholders: str | None = None,
    notes: ImportNotes | None = None, **_: Any
) -> Iterator[Trajectory]:
    """Every episode under ``src``: ``annotations/*.json``; screenshots in ``screenshots/`` or images_dir."""
    notes = notes if notes is not None else ImportNotes()
    fixed = None if placeholders in (None, "", "auto") else parse_size(placeholders, "--placeholders")
    src = Path(src)
    if source_kind(src) != "folder":
        raise DatasetError(f"{src}: a GUI-Odyssey source is a folder (annotations/*.json and screenshots/)")
    ann = src / "annotations" if (src / "annotations").is_dir() else src
    shots_dir = Path(images_dir) if images_dir else src / "screenshots"
    shots_root = Path(images_dir) if images_dir else src  # what a screenshot must lie inside, through no link
    files = sorted(ann.glob("*.json")) if ann.is_dir() else []
    if not files:
        raise DatasetError(f"{src}: no annotations/*.json files")
    seen: dict[str, str] = {}
    for path in files:
        where = str(path)
        raw = read_inside(path, src, where, what="the annotation", limit=MAX_RECORD_BYTES)
        if raw is None:
            raise DatasetError(f"{where}: not a file")
        d = json_record(raw, where)
        if not isinstance(d, dict):
            raise DatasetError(f"{where}: an annotation must be a JSON object")
        try:
            eid, task, steps_in = d["episode_id"], d["task_info"], d["steps"]
        except KeyError as e:
            raise DatasetError(f"{where}: missing {e.args[0]!r}") from None
        if isinstance(eid, bool) or not isinstance(eid, (str, int)):
            raise DatasetError(f"{where}: episode_id must be a text or a number, got {_s(eid)}")
        eid = str(eid)
        check_episode_id(eid, where, prefix=ID_PREFIX)  # the id written is ID_PREFIX + eid
        if eid in seen:
            raise DatasetError(f"{where}: episode_id {_s(eid)} is also the episode_id of {seen[eid]}; an id "
                               "may name one episode only")
        seen[eid] = path.name
        if not isinstance(task, dict):
            raise DatasetError(f"{where}: task_info must be an object")
        if not isinstance(steps_in, list) or not steps_in:
            raise DatasetError(f"{where}: 'steps' must be a non-empty list")
        goal = task.get("instruction") or task.get("task")
        if not isinstance(goal, str):
            raise DatasetError(f"{where}: task_info has no instruction or task text")
        device = d.get("device_info") if isinstance(d.get("device_info"), dict) else {}
        budget = EpisodeBudget(where)
        budget.steps_declared(len(steps_in))
        steps = []
        for i, s in enumerate(steps_in):
            at = f"{where} step {i}"
            if not isinstance(s, dict) or "action" not in s or "screenshot" not in s:
                raise DatasetError(f"{at}: a step needs 'action' and 'screenshot'")
            if not isinstance(s["screenshot"], str) or "\x00" in s["screenshot"]:
                raise DatasetError(f"{at}: screenshot must be a file name, got {_s(s['screenshot'])}")
            p = shots_dir / Path(s["screenshot"]).name
            meta: dict[str, Any] = {}
            # a link leading outside the folder, a pipe, a file over 64 MiB: one line, nothing read
            data = read_inside(p, shots_root, at)
            placeholder = data is None
            if data is None:
                if not placeholders:
                    raise DatasetError(f"{at}: screenshot {p} not found (--placeholders WxH|auto stands "
                                       "blank screenshots in)")
                size = fixed or _device_size(device, at)
                data, meta["placeholder"] = placeholder_png(*size), True
                notes.placeholders += 1
            budget.step(data)
            w, h = image_size(data, at, decode=not placeholder)  # placeholders are our own blank PNGs
            action = guiodyssey_action(s["action"], s.get("info", ""), at)
            target = guiodyssey_target(action)
            meta.update({STEP_TARGET_KEY: target.to_dict(), "episode_id": eid})
            if s.get("ps"):
                meta["ps"] = s["ps"] if isinstance(s["ps"], str) else _s(s["ps"], 2000)
            steps.append(Step(i, Observation(data, w, h), action, metadata=meta))
        params = {k: task[k] for k in ("category", "app", "meta_task", "task") if k in task}
        spec = TaskSpec(SUITE, eid, 0, goal, max_steps=len(steps), params=params)
        done = isinstance(steps[-1].action, Finish) and steps[-1].action.status == "success"
        yield Trajectory(
            f"{ID_PREFIX}{eid}",
            spec,
            tuple(steps),
            success=1.0 if done else 0.0,
            agent=f"import:{SUITE}",
            metadata={"source": SUITE, "device": str(device.get("device_name", ""))[:200], "episode_id": eid},
        )


def _device_size(device: dict, where: str) -> tuple[int, int]:
    w, h = device.get("w"), device.get("h")
    if isinstance(w, bool) or isinstance(h, bool) or not isinstance(w, int) or not isinstance(h, int) \
            or w <= 0 or h <= 0:
        raise DatasetError(f"{where}: --placeholders auto needs the annotation's device_info w and h")
    return parse_size(f"{w}x{h}", "device_info size")
