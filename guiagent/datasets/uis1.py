"""The JSONL layout UI-S1's reference code trains on (one episode a line).

Schema (https://github.com/X-PLUG/MobileAgent/tree/main/UI-S1:
``datasets/android_control_train_example.jsonl``, ``verl/utils/reward_score/gui_utils/utils.py``)::

    {"goal": str, "is_successful": bool,
     "steps": [{"action_content": {"action": "click", "coordinate": [x, y], "bbox": [x0, y0, x1, y1]},
                "screenshot": "/path/0_0.png", "thought": str (optional)}, ...]}

Coordinates are pixels of the screenshot. Actions: ``click`` / ``long_press``
(``coordinate``, optional ``bbox`` of the target), ``swipe`` (``coordinate``,
``coordinate2``, or ``direction``), ``type`` / ``answer`` / ``key`` (``text``),
``open`` (``text``: the app), ``system_button`` (``button``: Back, Home, Enter),
``wait`` (``time``), ``terminate`` (``status``).

A recorded ``swipe`` stores the scroll the other way round from the finger: its
matcher flips the recorded up/down before comparing with the model's finger
direction (AndroidControl's "scroll down" becomes ``[540, 600] -> [540, 1800]``).
So the finger path imported here is ``coordinate2 -> coordinate``, and a
``direction`` becomes a :class:`~guiagent.types.Scroll` in that direction.

Screenshot paths are tried as written, then relative to the JSONL file's folder,
then as ``images_dir/<file name>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from guiagent.datasets._common import DatasetError, box_unit, image_size, iter_files, unit
from guiagent.types import (
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
    Swipe,
    TaskSpec,
    Trajectory,
    Type,
    Wait,
)

__all__ = ["read_uis1", "uis1_action", "SUITE"]

SUITE = "uis1"


def _point(c: Any, w: int, h: int, where: str, what: str) -> tuple[float, float]:
    if not (isinstance(c, (list, tuple)) and len(c) == 2):
        raise DatasetError(f"{where}: {what} must be [x, y], got {c!r}")
    return unit(c[0], w, where, f"{what}[0]"), unit(c[1], h, where, f"{what}[1]")


def uis1_action(a: Any, w: int, h: int, where: str) -> tuple[Action, list[float] | None]:
    """One ``action_content`` as a typed action, plus the target box (normalised) when given."""
    if not isinstance(a, dict) or "action" not in a:
        raise DatasetError(f"{where}: action_content must be an object with 'action', got {a!r}")
    t = a["action"]
    try:
        if t in ("click", "long_press"):
            x, y = _point(a["coordinate"], w, h, where, "coordinate")
            box = a.get("bbox")
            return (Click(x, y) if t == "click" else LongPress(x, y)), (
                None if box is None else box_unit(box, w, h, where)
            )
        if t == "swipe":
            if "direction" in a:
                return Scroll(str(a["direction"]).lower()), None
            x1, y1 = _point(a["coordinate"], w, h, where, "coordinate")
            x2, y2 = _point(a["coordinate2"], w, h, where, "coordinate2")
            return Swipe(x2, y2, x1, y1), None
        if t == "type":
            return Type(str(a["text"])), None
        if t == "answer":
            return Answer(str(a["text"])), None
        if t == "key":
            return Key(str(a["text"])), None
        if t == "open":
            return OpenApp(str(a["text"])), None
        if t == "system_button":
            b = str(a["button"]).strip().lower()
            if b == "back":
                return NavigateBack(), None
            if b == "home":
                return NavigateHome(), None
            if b == "enter":
                return Key("Enter"), None
            raise DatasetError(f"{where}: unknown system_button {a['button']!r}")
        if t == "wait":
            return Wait(float(a.get("time", 1.0))), None
        if t == "terminate":
            return Finish(str(a.get("status", "success"))), None
    except KeyError as e:
        raise DatasetError(f"{where}: {t} action without {e.args[0]!r}: {a!r}") from None
    except (TypeError, ValueError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: bad {t} action {a!r}: {e}") from None
    raise DatasetError(f"{where}: unknown action {t!r}")


def _screenshot(p: Any, base: Path, images_dir: Path | None, where: str) -> bytes:
    if not isinstance(p, str) or not p:
        raise DatasetError(f"{where}: screenshot must be a path, got {p!r}")
    tries = [Path(p), base / p.lstrip("/")] + ([images_dir / Path(p).name] if images_dir else [])
    for c in tries:
        if c.is_file():
            return c.read_bytes()
    raise DatasetError(
        f"{where}: screenshot {p!r} not found (tried {', '.join(map(str, tries))}; "
        "pass --images DIR for a folder holding the files)"
    )


def read_uis1(src: str | Path, *, images_dir: str | Path | None = None, **_: Any) -> Iterator[Trajectory]:
    """Every episode in ``src`` (a ``.jsonl`` file or a folder of them)."""
    imgs = Path(images_dir) if images_dir else None
    for path in iter_files(Path(src), ("*.jsonl",)):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}: line {n}"
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DatasetError(f"{where}: not JSON ({e})") from None
                if (
                    not isinstance(d, dict)
                    or not isinstance(d.get("goal"), str)
                    or not isinstance(d.get("steps"), list)
                    or not d["steps"]
                ):
                    raise DatasetError(
                        f"{where}: an episode needs 'goal' (text) and a non-empty 'steps' list"
                    )
                steps = []
                for i, s in enumerate(d["steps"]):
                    at = f"{where} step {i}"
                    if not isinstance(s, dict):
                        raise DatasetError(f"{at}: a step must be an object")
                    shot = _screenshot(s.get("screenshot"), path.parent, imgs, at)
                    w, h = image_size(shot, at)
                    action, box = uis1_action(s.get("action_content"), w, h, at)
                    meta: dict[str, Any] = {"target_box": box} if box is not None else {}
                    thought = s.get("thought") or ""
                    steps.append(
                        Step(i, Observation(shot, w, h), action, thought=str(thought), metadata=meta)
                    )
                ok = d.get("is_successful", True)
                spec = TaskSpec(SUITE, f"{path.stem}:{n}", n, d["goal"], max_steps=len(steps))
                yield Trajectory(
                    f"uis1-{path.stem}-{n}",
                    spec,
                    tuple(steps),
                    success=1.0 if ok else 0.0,
                    agent=f"import:{SUITE}",
                    metadata={"source": SUITE, "file": path.name, "line": n},
                )
