"""Tolerant JSON for model text: find objects in prose, decode with a small repair pass.

Models wrap JSON in prose and code fences, leave ``// comments`` and trailing
commas, write Python-style single quotes or ``True``/``None``. :func:`loads`
tries strict :func:`json.loads` first and then one *lexical* repair pass that
only touches those constructs (comments, trailing commas, quote style, Python
literals, bare keys); it never evaluates anything. A general-purpose repairer
such as ``json-repair`` was not used on purpose: it turns arbitrary prose into
some object, and here malformed text must stay an error.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["loads", "find_objects", "strip_fences"]

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\n?")
_LITERALS = {"True": "true", "False": "false", "None": "null"}
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# JSON escapes that survive a re-encode unchanged
_JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "'": "'"}


def strip_fences(text: str) -> str:
    """Remove Markdown code-fence markers (keeps what was inside them). Backticks inside a JSON
    string of an object (text to type that holds a fence) are the string's, and stay."""
    if "```" not in text:
        return text
    out: list[str] = []
    depth, in_string, i, n = 0, False, 0, len(text)
    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            in_string = c != '"'
        elif c == "`":
            m = _FENCE.match(text, i)
            if m:
                i = m.end()
                continue
        elif c == '"' and depth > 0:  # strings are tracked inside objects only: prose has stray quotes
            in_string = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        out.append(c)
        i += 1
    return "".join(out)


def find_objects(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` spans of the top-level ``{...}`` objects in ``text``.

    Brace matching skips braces inside single- or double-quoted strings. An
    object still open at the end of the text gets ``end = len(text)`` (a
    truncated generation); :func:`loads` will then usually fail on it.
    """
    spans: list[tuple[int, int]] = []
    depth, start, quote, i, n = 0, -1, "", 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'" and depth > 0:
            # an apostrophe inside a bare word ("it's") is not a string opener
            if c == '"' or not (i > 0 and text[i - 1].isalnum()):
                quote = c
        elif c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
        i += 1
    if depth > 0:
        spans.append((start, n))
    return spans


def loads(text: str) -> Any:
    """Decode JSON, repairing comments, trailing commas, single quotes and Python literals.

    Raises ``ValueError`` when the text is not JSON even after the repair pass.
    """
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return json.loads(_repair(text))
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"not valid JSON: {e}") from None


def _read_string(text: str, i: int) -> tuple[str, int]:
    """Read a quoted string starting at ``text[i]``; return (decoded value, index after it)."""
    quote, out, i, n = text[i], [], i + 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_JSON_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        if c == quote:
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise json.JSONDecodeError("unterminated string", text, i)


def _repair(text: str) -> str:
    """One lexical pass producing strict JSON from JSON-ish text."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            value, i = _read_string(text, i)
            out.append(json.dumps(value, ensure_ascii=False))
            continue
        if text.startswith("//", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c in "}]":
            # drop a trailing comma before a closing bracket
            k = len(out) - 1
            while k >= 0 and out[k].isspace():
                k -= 1
            if k >= 0 and out[k] == ",":
                del out[k]
            out.append(c)
            i += 1
            continue
        m = _BARE.match(text, i) if (c.isalpha() or c == "_") else None
        if m:
            word = m.group(0)
            j = m.end()
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == ":":
                out.append(json.dumps(word))  # bare object key
            else:
                out.append(_LITERALS.get(word, word))
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)
