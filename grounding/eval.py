"""Grounding evaluation: point-in-box accuracy on ScreenSpot-format data.

A record names a screenshot, an instruction ("click the search button") and
the target's box in screenshot pixels. The model's reply is parsed with an
action format; the prediction counts as correct when its point (Click,
LongPress, or Type at a point) lies inside the box, edges included. Replies that
do not parse, or parse to an action without a point, count as wrong and are
tallied separately.

ScreenSpot / ScreenSpot-v2 JSON files store ``bbox`` as ``[x, y, width, height]``;
ScreenSpot-Pro as ``[x1, y1, x2, y2]``. :func:`load_records` takes
``bbox_format`` accordingly ("xyxy" by default) and reads ``img_filename``,
``instruction``, ``data_type`` and ``platform`` (or ``data_source``).

Example (the command the tests run)::

    report = evaluate(predict, get_format("uitars"), load_records("screenspot.json", image_root="imgs"))
    print(report.accuracy, report.by_data_type)
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from PIL import Image

from guiagent.types import Action, Click, LongPress, ParseError, Type

from grounding.base import ActionFormat

__all__ = ["GroundingRecord", "RecordResult", "GroundingReport", "load_records", "action_point", "evaluate"]

Predict = Callable[[bytes, str], str]


@dataclass(frozen=True)
class GroundingRecord:
    """One ScreenSpot-style sample; ``bbox`` is ``(x1, y1, x2, y2)`` in screenshot pixels."""

    image: str
    instruction: str
    bbox: tuple[float, float, float, float]
    data_type: str = ""
    platform: str = ""

    def __post_init__(self) -> None:
        if len(self.bbox) != 4:
            raise ValueError(f"bbox must be (x1, y1, x2, y2), got {self.bbox!r}")
        x1, y1, x2, y2 = self.bbox
        if x2 < x1 or y2 < y1:
            raise ValueError(f"bbox must have x1 <= x2 and y1 <= y2, got {self.bbox!r}")


@dataclass(frozen=True)
class RecordResult:
    """The verdict on one record: the reply, what it parsed to, the point, and the hit."""

    record: GroundingRecord
    response: str
    action: Action | None
    parse_error: ParseError | None
    point: tuple[float, float] | None  # screenshot pixels
    correct: bool


@dataclass(frozen=True)
class GroundingReport:
    """Accuracy overall and per ``data_type`` / ``platform`` (each ``{"correct", "total", "accuracy"}``)."""

    total: int
    correct: int
    parse_errors: int
    no_point: int
    by_data_type: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    by_platform: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    results: tuple[RecordResult, ...] = ()

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Summary figures (no per-record results), JSON-serialisable."""
        return {"total": self.total, "correct": self.correct, "accuracy": self.accuracy,
                "parse_errors": self.parse_errors, "no_point": self.no_point,
                "by_data_type": {k: dict(v) for k, v in self.by_data_type.items()},
                "by_platform": {k: dict(v) for k, v in self.by_platform.items()}}


def load_records(
    source: str | Path | Iterable[Mapping[str, Any]],
    *,
    image_root: str | Path | None = None,
    bbox_format: Literal["xyxy", "xywh"] = "xyxy",
) -> list[GroundingRecord]:
    """Records from a ScreenSpot-style JSON file (a list of objects) or from dicts.

    Image paths are taken from ``img_filename`` (or ``image``) and joined to
    ``image_root`` (default: the JSON file's folder).
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        rows = json.loads(path.read_text(encoding="utf-8"))
        root = Path(image_root) if image_root is not None else path.parent
    else:
        rows = list(source)
        root = Path(image_root) if image_root is not None else None
    if bbox_format not in ("xyxy", "xywh"):
        raise ValueError(f"bbox_format must be 'xyxy' or 'xywh', got {bbox_format!r}")
    out = []
    for i, row in enumerate(rows):
        name = row.get("img_filename", row.get("image"))
        if name is None or "instruction" not in row or "bbox" not in row:
            raise ValueError(f"record {i} needs img_filename (or image), instruction and bbox; got {sorted(row)}")
        b = [float(v) for v in row["bbox"]]
        if len(b) != 4:
            raise ValueError(f"record {i}: bbox must have four numbers, got {row['bbox']!r}")
        if bbox_format == "xywh":
            b = [b[0], b[1], b[0] + b[2], b[1] + b[3]]
        image = str(root / name) if root is not None else str(name)
        out.append(GroundingRecord(image=image, instruction=str(row["instruction"]), bbox=tuple(b),
                                   data_type=str(row.get("data_type", "")),
                                   platform=str(row.get("platform", row.get("data_source", "")))))
    return out


def action_point(action: Action | None) -> tuple[float, float] | None:
    """The normalised point an action targets, or ``None`` (Click, LongPress, Type at a point)."""
    if isinstance(action, (Click, LongPress)):
        return action.x, action.y
    if isinstance(action, Type) and action.x is not None and action.y is not None:
        return action.x, action.y
    return None


def _tally(results: Sequence[RecordResult], key: Callable[[GroundingRecord], str]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[bool]] = {}
    for r in results:
        groups.setdefault(key(r.record), []).append(r.correct)
    return {k: {"correct": sum(v), "total": len(v), "accuracy": sum(v) / len(v)} for k, v in sorted(groups.items())}


def evaluate(predict: Predict, fmt: ActionFormat, records: Sequence[GroundingRecord]) -> GroundingReport:
    """Ask ``predict(image_bytes, instruction) -> model text`` about every record and score the points.

    The image size for parsing comes from the image file itself; the point is
    compared with the record's box in the screenshot's pixels, edges included.
    """
    results = []
    for rec in records:
        data = Path(rec.image).read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            size = im.size
        response = predict(data, rec.instruction)
        parsed = fmt.parse(response, size)
        action = None if isinstance(parsed, ParseError) else parsed
        unit = action_point(action)
        point = None if unit is None else (unit[0] * size[0], unit[1] * size[1])
        x1, y1, x2, y2 = rec.bbox
        hit = point is not None and x1 <= point[0] <= x2 and y1 <= point[1] <= y2
        results.append(RecordResult(rec, response, action, parsed if isinstance(parsed, ParseError) else None,
                                    point, hit))
    return GroundingReport(
        total=len(results),
        correct=sum(r.correct for r in results),
        parse_errors=sum(r.parse_error is not None for r in results),
        no_point=sum(r.parse_error is None and r.point is None for r in results),
        by_data_type=_tally(results, lambda r: r.data_type),
        by_platform=_tally(results, lambda r: r.platform),
        results=tuple(results),
    )
