"""Reading a judge model's text: a verdict, or the steps it wants to look at.

Judges answer in several styles and small models break every one of them, so
the parser accepts, in order of preference:

1. a JSON object (also inside a Markdown code fence, with trailing commas,
   single quotes, Python ``True``/``False``/``None``) carrying ``success`` and/or
   ``score``, ``reason`` and ``evidence_steps`` (several synonyms of each key) —
   found and decoded by the project's one lenient JSON reader,
   :mod:`guiagent.jsontext` (string-aware brace matching, a lexical repair
   pass; nothing is ever evaluated);
2. a labelled line in the WebJudge / autoeval style — ``Status: success``,
   ``Verdict: FAILURE``, ``Final answer: yes`` — the last such line wins, so an
   echo of the format instructions earlier in the text does no harm;
3. upper-case ``SUCCESS`` / ``FAILURE`` keywords in prose (both kinds → contradictory);
4. a bare ``yes`` / ``no`` as the first word.

Nothing here raises on model text: every outcome is a :class:`ParsedVerdict`,
with ``error`` set (and ``success is None``) when no verdict could be read or
the text contradicts itself.

>>> parse_verdict('```json\\n{"success": true, "score": "90%", "reason": "saved",}\\n```').score
0.9
>>> parse_verdict("Thoughts: the alarm is set.\\nStatus: success").success
True
>>> parse_verdict("maybe").error
'no verdict found in the judge output'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Collection, Iterable

from guiagent import jsontext

__all__ = ["ParsedVerdict", "parse_verdict", "parse_step_selection", "coerce_success", "coerce_score",
           "SUCCESS_THRESHOLD"]

#: a score at or above this counts as success (the store's threshold, too)
SUCCESS_THRESHOLD = 0.5
#: the longest object span handed to the JSON reader; longer blobs are not a verdict
_MAX_OBJECT = 20_000
_MAX_REASON = 2_000

_SUCCESS_KEYS = ("success", "successful", "task_success", "succeeded", "completed", "complete",
                 "task_completed", "status", "verdict", "result", "outcome", "answer", "judgement",
                 "judgment")
_SCORE_KEYS = ("score", "reward", "rating", "progress", "success_score")
_REASON_KEYS = ("reason", "reasoning", "rationale", "explanation", "thoughts", "thought", "justification",
                "analysis")
_STEP_KEYS = ("evidence_steps", "cited_steps", "evidence", "steps", "key_steps", "step_indices")

_TRUE_WORDS = {"true", "yes", "y", "success", "successful", "succeeded", "succeed", "pass", "passed",
               "complete", "completed", "done", "achieved", "correct", "1"}
_FALSE_WORDS = {"false", "no", "n", "failure", "fail", "failed", "unsuccessful", "not success",
                "not successful", "not_success", "incomplete", "not completed", "not complete",
                "not achieved", "incorrect", "0"}

# A labelled answer line: "Status: success", "**Verdict**: FAILURE", "Final answer - yes".
_LABELLED = re.compile(
    r"(?:status|verdict|final\s+answer|final\s+verdict|answer|conclusion|evaluation|result|outcome|"
    r"judge?ment|task\s+status)\**\s*[:：=\-]\s*[*\"'`\[]*\s*"
    r"(not\s+successful|not\s+success|unsuccessful|successful|success|succeeded|failure|failed|fail|"
    r"incomplete|completed|complete|yes|no|true|false)\b",
    re.I)
_KEYWORD = re.compile(r"\b(NOT\s+SUCCESSFUL|NOT\s+SUCCESS|UNSUCCESSFUL|SUCCESSFUL|SUCCESS|FAILURE|FAILED)\b")
_BARE = re.compile(r"^\W*(yes|no)\b", re.I)
_SCORE_TEXT = re.compile(r"\bscore\**\s*[:：=]\s*\**\s*(-?\d+(?:\.\d+)?\s*(?:%|/\s*\d+(?:\.\d+)?)?)", re.I)
_REASON_TEXT = re.compile(r"(?:thoughts?|reason(?:ing)?|rationale|explanation)\**\s*[:：]\s*(.+?)"
                          r"(?=\n\s*\**\s*(?:status|verdict|final|score|answer|evidence)\b|\Z)", re.I | re.S)
_STEPS_TEXT = re.compile(r"(?:evidence[_ ]steps|cited[_ ]steps|evidence)\**\s*[:：=]\s*\[?([\d,\s]+)\]?",
                         re.I)


@dataclass(frozen=True)
class ParsedVerdict:
    """What a judge's text says. ``error`` set means no usable verdict (``success is None``)."""

    success: bool | None
    score: float | None
    reason: str
    cited_steps: tuple[int, ...]
    error: str | None = None
    style: str = ""
    """how it was read: ``json``, ``labelled``, ``keyword``, ``yes_no``, ``score`` (empty on error)"""


def coerce_success(value: Any) -> bool | None:
    """``True``/``False`` from a bool, 1/0, or words like ``"yes"``, ``"SUCCESS"``; else ``None``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True if value == 1 else False if value == 0 else None
    if isinstance(value, str):
        word = re.sub(r"[\s_\-]+", " ", value.strip().strip(".!*\"'`").lower())
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def coerce_score(value: Any) -> float | None:
    """A score in [0, 1] from ``0.8``, ``"0.8"``, ``"80%"``, ``"8/10"`` or ``80``; ``None`` if unreadable.

    Numbers in (1, 100] without a sign are read as percentages; anything else
    outside [0, 1] (negative, above 100, NaN) is ``None``.
    """
    if isinstance(value, bool) or value is None:
        return None
    percent = False
    if isinstance(value, str):
        text = value.strip().rstrip(".")
        m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", text)
        if m:
            num, den = float(m.group(1)), float(m.group(2))
            return num / den if den > 0 and 0 <= num <= den else None
        if text.endswith("%"):
            percent, text = True, text[:-1].strip()
        try:
            value = float(text)
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    x = float(value)
    if not math.isfinite(x) or x < 0:
        return None
    if percent or 1.0 < x <= 100.0:
        x /= 100.0
    return x if x <= 1.0 else None


def _objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object (dict) in the text, in order, read by :mod:`guiagent.jsontext`.

    Braces inside quoted strings do not count (``"reason": "the {x} field"``), and
    Markdown fences need no special case: the object inside is found like any other.
    """
    out = []
    for start, end in jsontext.find_objects(text):
        if end - start > _MAX_OBJECT:
            continue
        try:
            obj = jsontext.loads(text[start:end])
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _get(obj: dict[str, Any], keys: Iterable[str]) -> Any:
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    for k in keys:
        if k in lowered:
            return lowered[k]
    return None


def _steps(value: Any) -> list[int]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    elif isinstance(value, str):
        value = re.findall(r"-?\d+", value)
    if not isinstance(value, (list, tuple)):
        return []
    out = []
    for v in value:
        if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
            v = int(v)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            out.append(v)
    return out


def _clean_steps(steps: Iterable[int], valid: Collection[int] | None) -> tuple[int, ...]:
    """Unique, sorted, and (when ``valid`` is given) only steps that exist."""
    return tuple(sorted({s for s in steps if valid is None or s in valid}))


def _reason(text: str) -> str:
    m = _REASON_TEXT.search(text)
    reason = (m.group(1) if m else text).strip()
    return reason[:_MAX_REASON]


def _reconcile(success: bool | None, score: float | None) -> tuple[bool | None, float | None, str | None]:
    """Fill one from the other; flag a success flag that the score contradicts."""
    if success is None and score is None:
        return None, None, "no verdict found in the judge output"
    if success is None:
        return score >= SUCCESS_THRESHOLD, score, None  # type: ignore[operator]
    if score is None:
        return success, 1.0 if success else 0.0, None
    if success != (score >= SUCCESS_THRESHOLD):
        return None, None, (f"contradictory verdict: success={str(success).lower()} but score={score:g} "
                            f"(threshold {SUCCESS_THRESHOLD:g})")
    return success, score, None


def _from_json(obj: dict[str, Any], text: str, valid: Collection[int] | None) -> ParsedVerdict:
    success = coerce_success(_get(obj, _SUCCESS_KEYS))
    score = coerce_score(_get(obj, _SCORE_KEYS))
    reason = _get(obj, _REASON_KEYS)
    reason = reason.strip()[:_MAX_REASON] if isinstance(reason, str) else ""
    steps = _clean_steps(_steps(_get(obj, _STEP_KEYS)), valid)
    success, score, error = _reconcile(success, score)
    return ParsedVerdict(success, score, reason, steps, error, "" if error else "json")


def _from_prose(text: str, valid: Collection[int] | None, json_reason: str = "") -> ParsedVerdict:
    steps_m = _STEPS_TEXT.search(text)
    steps = _clean_steps(_steps(steps_m.group(1)) if steps_m else [], valid)
    score_m = _SCORE_TEXT.search(text)
    score = coerce_score(score_m.group(1).replace(" ", "")) if score_m else None
    success, style = None, "score" if score is not None else ""
    labelled = _LABELLED.findall(text)
    if labelled:
        success, style = coerce_success(labelled[-1]), "labelled"
    else:
        found = {coerce_success(re.sub(r"\s+", " ", k)) for k in _KEYWORD.findall(text)}
        if found == {True, False}:
            return ParsedVerdict(None, None, json_reason or _reason(text), steps,
                                 "contradictory verdict: the text says both SUCCESS and FAILURE")
        if found:
            success, style = found.pop(), "keyword"
        else:
            m = _BARE.match(text)
            if m:
                success, style = m.group(1).lower() == "yes", "yes_no"
    success, score, error = _reconcile(success, score)
    return ParsedVerdict(success, score, json_reason or _reason(text), steps, error, "" if error else style)


def parse_verdict(text: Any, valid_steps: Collection[int] | None = None) -> ParsedVerdict:
    """Read a verdict from judge output; never raises.

    ``valid_steps`` are the step indices the trajectory has: cited steps outside
    them are dropped. A JSON answer that carries neither ``success`` nor
    ``score`` falls back to reading the prose around it.
    """
    if not isinstance(text, str) or not text.strip():
        return ParsedVerdict(None, None, "", (), "empty judge output")
    try:
        json_reason = ""
        for obj in reversed(_objects(text)):  # the last object is the answer; earlier ones echo the format
            parsed = _from_json(obj, text, valid_steps)
            if parsed.error is None or parsed.error.startswith("contradictory"):
                return parsed
            json_reason = json_reason or parsed.reason
        return _from_prose(text, valid_steps, json_reason)
    except Exception as exc:  # a parser bug must not take a training run down; report it as data
        return ParsedVerdict(None, None, "", (), f"unreadable judge output ({type(exc).__name__}: {exc})")


def parse_step_selection(text: Any, valid_steps: Collection[int], k: int) -> tuple[int, ...]:
    """The (at most ``k``) existing step indices a judge picked as evidence, in the order given.

    Reads ``{"steps": [...]}`` / ``{"evidence_steps": [...]}``, a bare JSON list,
    or failing both every integer in the text. Never raises; may return ``()``.
    """
    if not isinstance(text, str) or k <= 0:
        return ()
    try:
        picked: list[int] = []
        for obj in reversed(_objects(text)):
            picked = _steps(_get(obj, _STEP_KEYS))
            if picked:
                break
        if not picked:
            m = re.search(r"\[([\d,\s]*)\]", text)
            picked = _steps(m.group(1)) if m else _steps(text)
        out: list[int] = []
        for s in picked:
            if s in valid_steps and s not in out:
                out.append(s)
        return tuple(out[:k])
    except Exception:
        return ()
