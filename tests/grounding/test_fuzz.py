"""Fuzzing the parsers: no text makes them raise, and the result is always an Action or a ParseError.

Two kinds of input per format: arbitrary unicode strings, and near-misses built
from the formats' own grammar (real action names and argument names with broken
quoting, odd numbers, truncation, duplicated calls, JSON damage). A parser bug
caught by the parse guard would come back as ``malformed`` with
``INTERNAL_ERROR`` in its message; that is asserted never to happen.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guiagent.types import ACTION_TYPES, ParseError

from grounding import FORMAT_NAMES, get_format
from grounding.spec import INTERNAL_ERROR

FORMATS = {name: get_format(name) for name in FORMAT_NAMES}
SIZE = (1080, 2400)
ACTION_CLASSES = tuple(ACTION_TYPES)


def _check(result) -> None:
    if isinstance(result, ParseError):
        assert result.code in ParseError.CODES
        assert INTERNAL_ERROR not in result.message, result
    else:
        assert isinstance(result, ACTION_CLASSES), result


# ----------------------------------------------------------------------------- near-miss grammar

NAMES = sorted({r.name for f in FORMATS.values() for r in f.table.rows}
               | {"tap", "left_double", "mouse_move", "double_click", "finish", "AWAKE", "INFO", ""})
ARGS = sorted({p.rstrip("?") for f in FORMATS.values() for r in f.table.rows for p in r.params}
              | {"point", "start_point", "end_point", "action", "kind", "x", "y", "status", "direction"})
numbers = st.one_of(
    st.integers(-50, 3000), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["x1", "", "-", "1e9"])
)
point_text = st.builds(
    lambda w, nums, sep, r: w[0] + "(" + sep.join(str(n) for n in nums) + (")" if r else "") + w[1],
    st.sampled_from([("", ""), ("<|box_start|>", "<|box_end|>"), ("<bbox>", "</bbox>"), ("<point>", "</point>"),
                     ("[", "]"), ("（", "）")]),
    st.lists(numbers, min_size=0, max_size=5),
    st.sampled_from([",", ", ", " ", "，"]),
    st.booleans(),
)
string_value = st.lists(st.sampled_from(list("ab '\"\\\n)(,=:：{}[]<>|") + ["\\n", "')", "\n\n"]),
                        max_size=10).map("".join)
value = st.one_of(point_text, string_value, numbers.map(str))
quote = st.sampled_from(["'", '"', ""])


@st.composite
def uitars_like(draw) -> str:
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(NAMES))
        args = []
        for _ in range(draw(st.integers(0, 3))):
            q = draw(quote)
            close = q if draw(st.booleans()) else ""
            args.append(f"{draw(st.sampled_from(ARGS))}={q}{draw(value)}{close}")
        end = draw(st.sampled_from([")", "", ") trailing prose", "))", ")\n"]))
        calls.append(f"{name}({', '.join(args)}{end}")
    head = draw(st.sampled_from(["", "Thought: plan\n", "Reflection: r\nAction_Summary: s\n", "思考：\n"]))
    mark = draw(st.sampled_from(["Action: ", "Action：", "", "**Action:** ", "Action:\n"]))
    sep = draw(st.sampled_from(["\n\n", "\n", " ", "Action: "]))
    text = head + mark + sep.join(calls)
    if draw(st.integers(0, 3)):
        return text
    return text[:draw(st.integers(1, max(1, len(text))))]  # a truncated generation


json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-100, 5000), st.floats(), st.text(max_size=8))
json_value = st.recursive(json_scalar, lambda c: st.one_of(st.lists(c, max_size=4),
                                                           st.dictionaries(st.text(max_size=6), c, max_size=4)),
                          max_leaves=8)


@st.composite
def json_like(draw) -> str:
    args = {"action": draw(st.sampled_from(NAMES))} if draw(st.booleans()) else {"kind": draw(st.sampled_from(NAMES))}
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(ARGS))
        args[key] = draw(st.one_of(json_value, st.lists(st.integers(-10, 5000), min_size=0, max_size=5),
                                   st.text(max_size=10)))
    style = draw(st.integers(0, 4))
    if style == 0:
        obj = {"name": draw(st.sampled_from(["mobile_use", "computer_use", "other"])), "arguments": args}
        if draw(st.booleans()):  # GUI-Owl / MAI-UI wrap the call in reasoning tags
            obj = {"__wrap__": draw(st.sampled_from(["<thinking>\nx\n</thinking>\n", "### Thought ###\nx\n"
                                                     "### Action ###\n", "why</think>\n"])), "call": obj}
    elif style == 1:
        obj = {"name": "mobile_use", "arguments": json.dumps(args)}
    elif style == 2:
        obj = {"thought": draw(st.text(max_size=10)), "action": args}
    else:
        obj = args
    prefix = ""
    if "__wrap__" in obj:
        prefix, obj = obj["__wrap__"], obj["call"]
    text = prefix + json.dumps(obj, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # damage: single quotes, trailing commas, comments
        text = text.replace('"', "'") if draw(st.booleans()) else text.replace("}", ",}").replace("]", "// c\n]")
    wrap = draw(st.sampled_from([("<tool_call>\n", "\n</tool_call>"), ("<tool_call>\n", ""), ("", ""),
                                 ("```json\n", "\n```"), ("prose ", " more prose")]))
    text = wrap[0] + text + wrap[1]
    if draw(st.booleans()):
        text = text + "\n" + text  # two calls
    if draw(st.integers(0, 3)):
        return text
    return text[:draw(st.integers(1, max(1, len(text))))]  # a truncated generation


@st.composite
def seed_xml_like(draw) -> str:
    """UI-TARS-2 replies: <seed:tool_call><function=..><parameter=..>..</parameter></function>, damaged."""
    funcs = []
    for _ in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from(NAMES))
        params = []
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.sampled_from(ARGS))
            open_tag = draw(st.sampled_from([f"<parameter={key}>", f"<parameter name='{key}'>",
                                             "<parameter=>", f"<parameter={key}"]))
            close = draw(st.sampled_from(["</parameter>", "", "</parameter", "</function>"]))
            params.append(open_tag + draw(st.one_of(value, point_text.map(lambda p: f"<point>{p}</point>")))
                          + close)
        head = draw(st.sampled_from([f"<function={name}>", f"<function name='{name}'>", "<function=>",
                                     f"<function={name}"]))
        end = draw(st.sampled_from(["\n</function>", "", "</function"]))
        funcs.append(head + "\n" + "\n".join(params) + end)
    think = draw(st.sampled_from(["", "<think>plan</think>", "<thinkt>看<point>1 2</point></thinkt>",
                                  "<think>"]))
    wrap = draw(st.sampled_from([("<seed:tool_call>\n", "\n</seed:tool_call>"), ("<tool_call>", "</tool_call>"),
                                 ("<seed:tool_call>", ""), ("", ""), ("<answer>", "</answer>")]))
    text = think + wrap[0] + "\n".join(funcs) + wrap[1]
    if draw(st.integers(0, 3)):
        return text
    return text[:draw(st.integers(1, max(1, len(text))))]  # a truncated generation


near_miss = st.one_of(uitars_like(), json_like(), seed_xml_like())

# ----------------------------------------------------------------------------- the tests

FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _every_format(text: str) -> None:
    for fmt in FORMATS.values():
        _check(fmt.parse(text, SIZE))
        assert isinstance(fmt.thought(text), str)


# One hypothesis run feeds every string to every format, so the generator's overhead is paid once:
# 1,000 random strings and 500 near misses by default, 20,000 and 10,000 with -m slow.
@settings(FUZZ, max_examples=1_000)
@given(st.text(max_size=160))
def test_random_strings_never_raise(text: str) -> None:
    _every_format(text)


@settings(FUZZ, max_examples=500)
@given(near_miss)
def test_near_miss_strings_never_raise(text: str) -> None:
    _every_format(text)


@pytest.mark.slow
@settings(FUZZ, max_examples=20_000)
@given(st.text(max_size=160))
def test_random_strings_never_raise_at_length(text: str) -> None:
    _every_format(text)


@pytest.mark.slow
@settings(FUZZ, max_examples=10_000)
@given(near_miss)
def test_near_miss_strings_never_raise_at_length(text: str) -> None:
    _every_format(text)


@pytest.mark.parametrize("name", FORMAT_NAMES)
@settings(max_examples=150, deadline=None, database=None)
@given(x=st.floats(0, 1), y=st.floats(0, 1), w=st.integers(100, 4000), h=st.integers(100, 4000))
def test_random_points_round_trip(name, x, y, w, h):
    from guiagent.types import Click

    fmt = FORMATS[name]
    size = (w, h)
    if max(w, h) / min(w, h) > 200 or "click" not in fmt.supported_kinds:  # marks: elements, not points
        return
    back = fmt.parse(fmt.format(Click(x, y), size), size)
    assert isinstance(back, Click), back
    frame = getattr(fmt, "frame", None)
    ew, eh = frame.extent(size) if frame is not None else (1000, 1000)
    tol_x = 0.5 / ew if frame is not None else 0.0005
    tol_y = 0.5 / eh if frame is not None else 0.0005
    assert abs(back.x - x) <= tol_x + 1e-9 and abs(back.y - y) <= tol_y + 1e-9


@settings(max_examples=150, deadline=None, database=None)
@given(element=st.integers(0, 10**9), text=st.text(max_size=30), submit=st.booleans())
def test_random_elements_round_trip(element, text, submit):
    from guiagent.types import ClickElement, TypeElement

    fmt = FORMATS["marks"]
    for action in (ClickElement(element), TypeElement(element, text, submit=submit)):
        assert fmt.parse(fmt.format(action, SIZE), SIZE) == action


def test_text_that_holds_a_code_fence_round_trips():
    """A fence inside a JSON string is the string's: typed text with backticks survives the printer
    and the parser (the fence markers around the reply still go)."""
    from guiagent.types import TypeElement

    fmt = FORMATS["marks"]
    for text in ("```", "a```b", "```json", "say ```\\n``` twice"):
        action = TypeElement(3, text)
        assert fmt.parse(fmt.format(action, SIZE), SIZE) == action
        assert fmt.parse("```json\n" + fmt.format(action, SIZE) + "\n```", SIZE) == action
