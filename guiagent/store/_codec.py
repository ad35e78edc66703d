"""Row <-> typed value conversions shared by the writer and the reader."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from guiagent.store.blobs import BlobStore, check_hash
from guiagent.store.errors import StoreError
from guiagent.types import Mark, Observation, ParseError, Step, action_from_dict, action_to_dict

STEP_COLUMNS = (
    "idx", "screenshot", "width", "height", "tree", "url", "last_action_error", "response", "thought",
    "action", "parse_error", "action_error", "reward", "reward_parts", "milestones", "terminated",
    "truncated", "policy_version", "latency_ms", "metadata", "marks",
)


def dumps(obj: Any, what: str) -> str:
    """JSON text of ``obj``; a typed error naming the field when it is not JSON data."""
    try:
        return json.dumps(obj, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{what} is not JSON-serialisable: {e}") from None


def loads(text: str | None, default: Any = None) -> Any:
    return default if text is None else json.loads(text)


def screenshot_ref(obs: Observation, blobs: BlobStore) -> str | None:
    """Store the observation's pixels (once) and return their hash.

    An observation that carries only a ``screenshot_ref`` (already stored, e.g. in
    a replayed trajectory) must name a blob present in this run directory.
    """
    if obs.screenshot is not None:
        ref, _ = blobs.put(obs.screenshot)
        if obs.screenshot_ref is not None and obs.screenshot_ref != ref:
            raise StoreError(f"observation screenshot_ref {obs.screenshot_ref!r} is not the sha256 of its "
                             f"screenshot bytes ({ref})")
        return ref
    if obs.screenshot_ref is not None:
        ref = check_hash(obs.screenshot_ref)
        blobs.path(ref)  # raises BlobNotFound
        return ref
    return None


def number(value: Any, what: str) -> float:
    """``value`` as a float when it is a finite number; :class:`StoreError` otherwise (SQLite would store a
    NaN as NULL, and JSON functions refuse NaN and infinities)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StoreError(f"{what} must be a number, got {value!r}")
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise StoreError(f"{what} must be a finite number, got {value!r:.40}")
    return f


#: what an SQLite INTEGER holds
INT64 = (-(2**63), 2**63 - 1)


def integer(value: Any, what: str) -> int:
    """``value`` as an int when it fits a 64-bit integer (SQLite's INTEGER); :class:`StoreError` otherwise."""
    v = int(value)
    if not INT64[0] <= v <= INT64[1]:
        raise StoreError(f"{what} must fit a 64-bit integer, got one of {v.bit_length()} bits")
    return v


def step_row(step: Step, blobs: BlobStore) -> tuple[Any, ...]:
    """The ``steps`` row of ``step`` (without ``episode_pk``), in STEP_COLUMNS order."""
    if not isinstance(step, Step):
        raise StoreError(f"expected a guiagent.types.Step, got {type(step).__name__}")
    obs = step.observation
    parts = {str(k): number(v, f"reward_parts[{k!r}]") for k, v in dict(step.reward_parts).items()}
    return (
        integer(step.index, "step index"), screenshot_ref(obs, blobs), integer(obs.width, "observation width"),
        integer(obs.height, "observation height"), obs.tree, obs.url,
        obs.last_action_error, step.response, step.thought,
        None if step.action is None else dumps(action_to_dict(step.action), "action"),
        None if step.parse_error is None else dumps(step.parse_error.to_dict(), "parse_error"),
        step.action_error, number(step.reward, "reward"), dumps(parts, "reward_parts"),
        dumps([bool(m) for m in step.milestones], "milestones"), int(bool(step.terminated)),
        int(bool(step.truncated)), integer(step.policy_version, "policy_version"), number(step.latency_ms, "latency_ms"),
        json_mapping(step.metadata, "step metadata"), marks_json(obs),
    )


def marks_json(obs: Observation) -> str | None:
    """The observation's mark table as JSON (``NULL`` when it has none; ``[]`` is an empty table)."""
    return None if obs.marks is None else dumps([m.to_dict() for m in obs.marks], "observation marks")


def parse_marks(text: str | None) -> tuple[Mark, ...] | None:
    """Inverse of :func:`marks_json`; a value another tool mangled reads as no marks."""
    if text is None:
        return None
    try:
        return tuple(Mark.from_dict(d) for d in json.loads(text))
    except (ValueError, TypeError, KeyError):
        return None


def obs_json(obs: Observation | None, blobs: BlobStore) -> str | None:
    """The final observation as JSON, its pixels replaced by a blob ref."""
    if obs is None:
        return None
    if not isinstance(obs, Observation):
        raise StoreError(f"final_observation must be an Observation, got {type(obs).__name__}")
    d = obs.to_dict(include_pixels=False)
    d["screenshot_ref"] = screenshot_ref(obs, blobs)
    return dumps(d, "final_observation")


def obs_from_json(text: str | None, blobs: BlobStore | None) -> Observation | None:
    """Inverse of :func:`obs_json`; with ``blobs`` the pixels are read back (ref then None)."""
    if text is None:
        return None
    d = json.loads(text)
    if blobs is not None and d.get("screenshot_ref") is not None:
        # Observation(**d) rather than from_dict: the bytes are raw, not base64.
        return Observation(**{**d, "screenshot": blobs.read(d["screenshot_ref"]), "screenshot_ref": None})
    return Observation.from_dict(d)


def parse_action(text: str | None):
    return None if text is None else action_from_dict(json.loads(text))


def parse_error(text: str | None) -> ParseError | None:
    return None if text is None else ParseError.from_dict(json.loads(text))


def json_mapping(value: Mapping[str, Any] | None, what: str) -> str:
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise StoreError(f"{what} must be a mapping, got {type(value).__name__}")
    return dumps(dict(value), what)
