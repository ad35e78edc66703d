"""AndroidControl episodes (TFRecord of ``tf.train.Example``, GZIP-compressed).

Schema (https://github.com/google-research/google-research/tree/master/android_control):
``episode_id`` (int64), ``goal`` (bytes), ``screenshots`` (PNG bytes, one per
observation), ``screenshot_widths`` / ``screenshot_heights`` (int64 lists),
``accessibility_trees`` (serialised protos), ``actions`` (JSON strings,
``len(screenshots) - 1`` of them), ``step_instructions`` (one per action).

Records are read by :mod:`guiagent.datasets.tfrecord` (the record framing with its
CRCs checked, and ``tf.train.Example`` declared from its published field numbers;
no TensorFlow needed); a truncated or corrupt file is reported with the file and
record number.

Each step's :class:`~guiagent.types.StepTarget` (metadata ``target``) holds the tap point and the
element box from the accessibility tree (below), the text, or the scroll direction (AndroidControl
writes where the view scrolls: convention ``scroll``); the step instruction and the episode id go in
the step's metadata too.

Every screenshot is decoded whole at import, the final observation's included: a damaged one is one
line naming the record, the episode and the step. An episode id that appears twice is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from google.protobuf.message import DecodeError

from guiagent.datasets._common import (
    DatasetError,
    EpisodeBudget,
    ImportNotes,
    image_size,
    iter_files,
    json_record,
    json_error,
    open_source_file,
    unit,
)
from guiagent.datasets.tfrecord import TFRecordError, count_values, iter_records, parse_example
from guiagent.types import (
    STEP_TARGET_KEY,
    Action,
    Click,
    LongPress,
    NavigateBack,
    NavigateHome,
    Observation,
    OpenApp,
    Scroll,
    Step,
    StepTarget,
    TaskSpec,
    Trajectory,
    Type,
    Wait,
)

__all__ = ["read_androidcontrol", "androidcontrol_action", "SUITE"]

SUITE = "androidcontrol"


def _feature(ex: Any, name: str, kind: str, where: str) -> list:
    feats = ex.features.feature
    if name not in feats:
        raise DatasetError(f"{where}: missing feature {name!r}")
    lst = getattr(feats[name], kind).value
    return list(lst)


def androidcontrol_action(a: Any, w: int, h: int, where: str) -> Action:
    """One AndroidControl action dict as a typed action (pixel coordinates normalised by ``w``, ``h``)."""
    if not isinstance(a, dict) or "action_type" not in a:
        raise DatasetError(f"{where}: an action must be an object with 'action_type', got {a!r}")
    t = a["action_type"]
    try:
        if t in ("click", "long_press"):
            x, y = unit(a["x"], w, where, "x"), unit(a["y"], h, where, "y")
            return Click(x, y) if t == "click" else LongPress(x, y)
        if t == "scroll":
            return Scroll(a["direction"])
        if t == "open_app":
            return OpenApp(str(a["app_name"]))
        if t == "type":  # taps (x, y), types, presses enter
            if "x" in a and "y" in a:
                return Type(
                    str(a["text"]), unit(a["x"], w, where, "x"), unit(a["y"], h, where, "y"), submit=True
                )
            return Type(str(a["text"]), submit=True)
        if t == "input_text":
            return Type(str(a["text"]))
        if t == "navigate_home":
            return NavigateHome()
        if t == "navigate_back":
            return NavigateBack()
        if t == "wait":
            return Wait(1.0)
    except KeyError as e:
        raise DatasetError(f"{where}: {t} action without {e.args[0]!r}: {_s(a)}") from None
    except (TypeError, ValueError, OverflowError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: bad {t} action {_s(a)}: {json_error(e)}") from None
    raise DatasetError(f"{where}: unknown action_type {_s(t)}")


def _s(v: Any, n: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def androidcontrol_target(action: Action, box: list[float] | None) -> StepTarget:
    """The step target of an AndroidControl action: its point and element box, its text, its scroll
    direction (AndroidControl's ``direction`` is where the view scrolls: convention ``scroll``)."""
    boxes = () if box is None else (tuple(box),)
    a: Any = action
    if isinstance(action, (Click, LongPress)):
        return StepTarget(action.kind, boxes=boxes, point=(a.x, a.y))
    if isinstance(action, Scroll):
        return StepTarget("scroll", direction=action.direction, convention="scroll")
    if isinstance(action, Type):
        return StepTarget("type", text=action.text, boxes=boxes,
                          point=None if action.x is None else (action.x, action.y))
    if isinstance(action, OpenApp):
        return StepTarget("open_app", text=action.app)
    if isinstance(action, (NavigateBack, NavigateHome)):
        return StepTarget(action.kind, button=action.kind)
    return StepTarget(action.kind)


def target_box(tree: bytes, x: float, y: float, w: int, h: int) -> list[float] | None:
    """The box (normalised) of the element at pixel ``(x, y)`` in a serialised accessibility forest.

    The smallest interactive node (clickable, long-clickable or editable) whose
    ``bounds_in_screen`` hold the point, else the smallest visible node; ``None`` when
    nothing holds it, the tree does not parse, or ``android_env`` (whose generated
    ``AndroidAccessibilityForest`` protos read it; the ``android`` extra) is missing.
    """
    try:
        from android_env.proto.a11y import android_accessibility_forest_pb2 as forest_pb2
    except ImportError:
        return None
    try:  # walked first: a forest of a million empty nodes would take gigabytes parsed
        count_values(tree, forest_pb2.AndroidAccessibilityForest.DESCRIPTOR)
        forest = forest_pb2.AndroidAccessibilityForest.FromString(tree)
    except (DecodeError, RecursionError, ValueError):  # TFRecordError is a ValueError
        return None
    best: tuple[int, int, Any] | None = None
    for win in forest.windows:
        for node in win.tree.nodes:
            b = node.bounds_in_screen
            if b.right <= b.left or b.bottom <= b.top:
                continue
            if not (b.left <= x <= b.right and b.top <= y <= b.bottom):
                continue
            interactive = node.is_clickable or node.is_long_clickable or node.is_editable
            if not (interactive or node.is_visible_to_user):
                continue
            key = (0 if interactive else 1, (b.right - b.left) * (b.bottom - b.top), b)
            if best is None or key[:2] < best[:2]:
                best = key
    if best is None:
        return None
    b = best[2]
    clamp = lambda v, s: min(1.0, max(0.0, v / s))  # noqa: E731
    return [clamp(b.left, w), clamp(b.top, h), clamp(b.right, w), clamp(b.bottom, h)]


def _episode(parsed: list, where: str, notes: ImportNotes) -> Trajectory:
    """The episode of a parsed record (``parsed``: a one-item list, emptied here so that the parsed
    message is freed once its lists are read: one copy of the screenshots in memory, not two)."""
    ex = parsed.pop()
    ids = _feature(ex, "episode_id", "int64_list", where)
    if len(ids) != 1:
        raise DatasetError(f"{where}: episode_id must hold one integer, got {ids!r}")
    eid = int(ids[0])
    where = f"{where} (episode {eid})"
    goal = b"".join(_feature(ex, "goal", "bytes_list", where)).decode("utf-8", "replace")
    if len(goal) > 100_000:
        raise DatasetError(f"{where}: the goal is {len(goal):,} characters long")
    shots = _feature(ex, "screenshots", "bytes_list", where)
    widths = _feature(ex, "screenshot_widths", "int64_list", where)
    heights = _feature(ex, "screenshot_heights", "int64_list", where)
    actions = _feature(ex, "actions", "bytes_list", where)
    instr = (
        _feature(ex, "step_instructions", "bytes_list", where)
        if "step_instructions" in ex.features.feature
        else []
    )
    feats = ex.features.feature
    trees = list(feats["accessibility_trees"].bytes_list.value) if "accessibility_trees" in feats else []
    del ex, feats
    if not (len(shots) == len(widths) == len(heights)):
        raise DatasetError(
            f"{where}: {len(shots)} screenshots but {len(widths)} widths and {len(heights)} heights"
        )
    if len(actions) != len(shots) - 1 or not actions:
        raise DatasetError(
            f"{where}: {len(actions)} actions for {len(shots)} screenshots (expected one fewer)"
        )
    if instr and len(instr) != len(actions):
        raise DatasetError(f"{where}: {len(instr)} step instructions for {len(actions)} actions")
    budget = EpisodeBudget(where)
    budget.steps_declared(len(actions))  # the record's size bounds its screenshots' (MAX_RECORD_BYTES)
    for i, shot in enumerate(shots):  # every screenshot decoded, the final observation's included
        at = f"{where} step {i}" if i < len(actions) else f"{where} final observation (screenshot {i})"
        got = image_size(shot, at)  # at most MAX_SCREENSHOT_PIXELS, judged from the header before decoding
        said = (int(widths[i]), int(heights[i]))
        if got != said:
            raise DatasetError(f"{at}: the screenshot is {got}, the record says {said}")
    steps = []
    for i, raw in enumerate(actions):
        at = f"{where} step {i}"
        w, h = int(widths[i]), int(heights[i])
        a = json_record(bytes(raw), at, "the action")
        text = instr[i].decode("utf-8", "replace") if instr else ""
        action = androidcontrol_action(a, w, h, at)
        box = None
        px = getattr(action, "x", None)
        if px is not None and i < len(trees):
            box = target_box(trees[i], px * w, action.y * h, w, h)  # type: ignore[union-attr]
        target = androidcontrol_target(action, box)
        meta: dict[str, Any] = {STEP_TARGET_KEY: target.to_dict(), "episode_id": eid}
        if text:
            meta["step_instruction"] = text
        if isinstance(action, Scroll):
            notes.swipes.add(_FINGER[action.direction], target.finger_direction, text)
        steps.append(
            Step(i, Observation(bytes(shots[i]), w, h), action, thought=text, metadata=meta)
        )
    final = Observation(bytes(shots[-1]), int(widths[-1]), int(heights[-1]))
    spec = TaskSpec(SUITE, f"episode_{eid}", eid, goal, max_steps=len(steps))
    return Trajectory(
        f"androidcontrol-{eid}",
        spec,
        tuple(steps),
        success=1.0,
        final_observation=final,
        agent=f"import:{SUITE}",
        metadata={"source": SUITE, "episode_id": eid},
    )


_FINGER = {"up": "down", "down": "up", "left": "right", "right": "left"}  # a scroll's finger moves against it


def read_androidcontrol(src: str | Path, *, notes: ImportNotes | None = None, **_: Any) -> Iterator[Trajectory]:
    """Every episode in ``src``: a TFRecord file, or a folder of ``android_control*`` / ``*.tfrecord*``."""
    notes = notes if notes is not None else ImportNotes()
    seen: dict[str, str] = {}  # episode id -> where it was first
    src = Path(src)
    for path in iter_files(src, ("android_control*", "*.tfrecord*")):
        records = iter_records(path, open_source_file(path, src))
        n = 0
        while True:
            try:
                rec = next(records, None)
                if rec is None:
                    break
                parsed = [parse_example(rec)]
                del rec  # the parsed example holds what is needed: one copy of the record, not two
            except TFRecordError as e:
                msg = str(e)
                raise DatasetError(
                    f"{path}: {msg if msg.startswith('record') else f'record {n}: {msg}'}"
                ) from None
            where = f"{path}: record {n}"
            t = _episode(parsed, where, notes)
            if t.episode_id in seen:
                raise DatasetError(f"{where}: episode_id {t.metadata['episode_id']} is also the episode_id "
                                   f"of {seen[t.episode_id]}; an id may name one episode only")
            seen[t.episode_id] = where
            yield t
            n += 1
    for line in notes.swipes.warnings(str(src), action_field="the recorded scroll",
                                      target_field="the step target"):
        notes.warn(line)
