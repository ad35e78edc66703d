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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from guiagent.datasets._common import DatasetError, image_size, unit
from guiagent.types import (
    Action,
    Click,
    Finish,
    LongPress,
    NavigateBack,
    NavigateHome,
    Observation,
    Step,
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
)

__all__ = ["read_guiodyssey", "guiodyssey_action", "SUITE"]

SUITE = "guiodyssey"
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


def read_guiodyssey(
    src: str | Path, *, images_dir: str | Path | None = None, **_: Any
) -> Iterator[Trajectory]:
    """Every episode under ``src``: ``annotations/*.json``; screenshots in ``screenshots/`` or images_dir."""
    src = Path(src)
    ann = src / "annotations" if (src / "annotations").is_dir() else src
    shots_dir = Path(images_dir) if images_dir else src / "screenshots"
    files = sorted(ann.glob("*.json")) if ann.is_dir() else []
    if not files:
        raise DatasetError(f"{src}: no annotations/*.json files")
    for path in files:
        where = str(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DatasetError(f"{where}: not JSON ({e})") from None
        try:
            eid, task, steps_in = str(d["episode_id"]), d["task_info"], d["steps"]
        except (KeyError, TypeError) as e:
            raise DatasetError(f"{where}: missing {e.args[0] if e.args else 'field'!r}") from None
        if not isinstance(steps_in, list) or not steps_in:
            raise DatasetError(f"{where}: 'steps' must be a non-empty list")
        goal = task.get("instruction") or task.get("task")
        if not isinstance(goal, str):
            raise DatasetError(f"{where}: task_info has no instruction or task text")
        steps = []
        for i, s in enumerate(steps_in):
            at = f"{where} step {i}"
            if not isinstance(s, dict) or "action" not in s or "screenshot" not in s:
                raise DatasetError(f"{at}: a step needs 'action' and 'screenshot'")
            p = shots_dir / Path(str(s["screenshot"])).name
            if not p.is_file():
                raise DatasetError(f"{at}: screenshot {p} not found")
            data = p.read_bytes()
            w, h = image_size(data, at)
            meta = {"ps": s["ps"]} if s.get("ps") else {}
            steps.append(
                Step(
                    i,
                    Observation(data, w, h),
                    guiodyssey_action(s["action"], s.get("info", ""), at),
                    metadata=meta,
                )
            )
        params = {k: task[k] for k in ("category", "app", "meta_task", "task") if k in task}
        spec = TaskSpec(SUITE, eid, 0, goal, max_steps=len(steps), params=params)
        done = isinstance(steps[-1].action, Finish) and steps[-1].action.status == "success"
        yield Trajectory(
            f"guiodyssey-{eid}",
            spec,
            tuple(steps),
            success=1.0 if done else 0.0,
            agent=f"import:{SUITE}",
            metadata={"source": SUITE, "device": d.get("device_info", {}).get("device_name", "")},
        )
