"""Reading judge output: tables of real-looking (and broken) judge texts -> verdict fields."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge.vlm_parse import coerce_score, coerce_success, parse_step_selection, parse_verdict

STEPS = {0, 1, 2, 3}

# (judge text, success, score, cited steps, error substring or None, style)
CASES = [
    # well-formed JSON, as the prompt asks
    ('{"success": true, "score": 0.9, "reason": "Wi-Fi is on.", "evidence_steps": [2, 3]}',
     True, 0.9, (2, 3), None, "json"),
    ('{"success": false, "score": 0.1, "reason": "wrong contact", "evidence_steps": [1]}',
     False, 0.1, (1,), None, "json"),
    # inside a code fence, with prose around it
    ('Let me check.\n```json\n{"success": true, "score": 1, "reason": "saved"}\n```\nDone.',
     True, 1.0, (), None, "json"),
    # trailing commas
    ('{"success": true, "score": 0.8, "evidence_steps": [1, 2,],}', True, 0.8, (1, 2), None, "json"),
    # single quotes / Python literals
    ("{'success': True, 'score': 0.75, 'reason': 'ok'}", True, 0.75, (), None, "json"),
    ("{'success': False, 'score': None, 'reason': 'no'}", False, 0.0, (), None, "json"),
    # missing fields are filled from each other
    ('{"success": true}', True, 1.0, (), None, "json"),
    ('{"score": 0.3}', False, 0.3, (), None, "json"),
    # score as a string, a percentage, a fraction, a 0-100 number
    ('{"success": "yes", "score": "0.7"}', True, 0.7, (), None, "json"),
    ('{"success": "yes", "score": "85%"}', True, 0.85, (), None, "json"),
    ('{"score": "9/10"}', True, 0.9, (), None, "json"),
    ('{"score": 80}', True, 0.8, (), None, "json"),
    # synonyms of keys and values
    ('{"status": "SUCCESS", "reasoning": "done"}', True, 1.0, (), None, "json"),
    ('{"Verdict": "failure", "Explanation": "nothing happened"}', False, 0.0, (), None, "json"),
    ('{"completed": "no"}', False, 0.0, (), None, "json"),
    ('{"success": 1, "evidence": "steps 1 and 3"}', True, 1.0, (1, 3), None, "json"),
    # cited steps out of range, negative, duplicated or not numbers are dropped
    ('{"success": true, "evidence_steps": [3, 7, -1, 3, "2", "x", 1.0]}', True, 1.0, (1, 2, 3), None, "json"),
    # an echoed format example before the real answer: the last object wins
    ('Format: {"success": true or false}\nAnswer: {"success": false, "reason": "not sent"}',
     False, 0.0, (), None, "json"),
    # WebJudge / autoeval style
    ('Thoughts: The alarm for 7:00 is visible and enabled.\nStatus: success',
     True, 1.0, (), None, "labelled"),
    ('Thoughts: the filter was not applied.\nStatus: "failure"', False, 0.0, (), None, "labelled"),
    # an echo of the instructions, then the answer
    ('Status: "success" or "failure"\nThoughts: the note is missing.\nStatus: failure', False, 0.0, (), None,
     "labelled"),
    ('**Verdict:** SUCCESS', True, 1.0, (), None, "labelled"),
    ('Reasoning: it typed the wrong name.\nVerdict: NOT SUCCESS', False, 0.0, (), None, "labelled"),
    ('Final answer: yes', True, 1.0, (), None, "labelled"),
    ('Status：failure', False, 0.0, (), None, "labelled"),  # full-width colon
    ('Status: success\nScore: 0.8\nEvidence steps: [2, 3, 9]', True, 0.8, (2, 3), None, "labelled"),
    # prose keywords
    ('The agent opened settings and enabled Bluetooth. SUCCESS', True, 1.0, (), None, "keyword"),
    ('FAILURE - the message was never sent.', False, 0.0, (), None, "keyword"),
    ('The task was NOT SUCCESSFUL because the date is wrong.', False, 0.0, (), None, "keyword"),
    # bare yes / no
    ('Yes', True, 1.0, (), None, "yes_no"),
    ('no.', False, 0.0, (), None, "yes_no"),
    ('  **No**, the form was not submitted.', False, 0.0, (), None, "yes_no"),
    # a score alone
    ('Score: 7/10', True, 0.7, (), None, "score"),
    # contradictions
    ('SUCCESS ... on second thought, FAILURE', None, None, (), "contradictory", ""),
    ('{"success": true, "score": 0.2}', None, None, (), "contradictory", ""),
    ('{"success": false, "score": "95%"}', None, None, (), "contradictory", ""),
    # nothing usable
    ('', None, None, (), "empty", ""),
    ('   \n ', None, None, (), "empty", ""),
    ('I am not sure what happened on the screen.', None, None, (), "no verdict", ""),
    ('{"success": "maybe", "score": "high"}', None, None, (), "no verdict", ""),
    ('{"success": tru', None, None, (), "no verdict", ""),
    ('{{{{{{{{{{', None, None, (), "no verdict", ""),
    ('{"score": 250}', None, None, (), "no verdict", ""),
    ('{"score": -0.5}', None, None, (), "no verdict", ""),
    ('{"score": NaN}', None, None, (), "no verdict", ""),
    # braces inside strings are text, not structure (the reader is string-aware)
    ('{"success": false, "score": 0.2, "reason": "the form still shows } and {name}"}',
     False, 0.2, (), None, "json"),
    ('Format: {"success": ...}\n{"reason": "closing } early", "success": true, "evidence_steps": [3]}',
     True, 1.0, (3,), None, "json"),
    # a Python expression is text, never evaluated
    ("{'success': __import__('os').system('true'), 'score': 0.9}", None, None, (), "no verdict", ""),
]


@pytest.mark.parametrize("text,success,score,cited,error,style", CASES)
def test_parse_verdict_table(text, success, score, cited, error, style):
    v = parse_verdict(text, STEPS)
    assert v.success is success
    assert v.score == (pytest.approx(score) if score is not None else None)
    assert v.cited_steps == cited
    if error is None:
        assert v.error is None
    else:
        assert v.error is not None and error in v.error
    assert v.style == style


def test_a_brace_inside_the_reason_keeps_the_whole_reason():
    v = parse_verdict('```json\n{"success": true, "score": 0.9, "reason": "dialog } closed; {x} shown"}\n```')
    assert (v.success, v.reason) == (True, "dialog } closed; {x} shown")


def test_reason_is_read_from_json_or_labels():
    assert parse_verdict('{"success": true, "reason": "  the switch is on  "}').reason == "the switch is on"
    v = parse_verdict("Thoughts: the list shows 3 items.\nStatus: success")
    assert v.reason == "the list shows 3 items."
    # a JSON object without a verdict keeps its reason when the prose decides
    v = parse_verdict('{"reason": "the note exists"}\nStatus: success')
    assert v.success is True and v.reason == "the note exists"


def test_without_valid_steps_every_integer_step_is_kept():
    assert parse_verdict('{"success": true, "evidence_steps": [40, 2, 2]}').cited_steps == (2, 40)


def test_non_string_input_is_an_error_not_an_exception():
    for junk in (None, 3, b"SUCCESS", ["yes"]):
        v = parse_verdict(junk)  # type: ignore[arg-type]
        assert v.success is None and v.error == "empty judge output"


@pytest.mark.parametrize("value,expected", [
    (True, True), (False, False), (1, True), (0, False), (0.5, None), ("Yes", True), ("no", False),
    ("SUCCESS", True), ("Failure.", False), ("not_success", False), ("unsure", None), (None, None),
    ([], None),
])
def test_coerce_success(value, expected):
    assert coerce_success(value) is expected


@pytest.mark.parametrize("value,expected", [
    (0.25, 0.25), (1, 1.0), (0, 0.0), ("0.6", 0.6), ("60%", 0.6), ("60 %", 0.6), ("3/4", 0.75), (75, 0.75),
    (100, 1.0), (101, None), (-1, None), ("5/0", None), ("6/5", None), ("high", None), (True, None),
    (float("inf"), None), (None, None),
])
def test_coerce_score(value, expected):
    got = coerce_score(value)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("text,k,expected", [
    ('{"steps": [3, 1]}', 3, (3, 1)),
    ('```json\n{"evidence_steps": ["2", 0]}\n```', 3, (2, 0)),
    ("[0, 0, 9, 2]", 3, (0, 2)),                       # duplicates and unknown steps dropped
    ('{"steps": [0, 1, 2, 3]}', 2, (0, 1)),            # at most k
    ("I want to see steps 1 and 3.", 3, (1, 3)),        # loose integers
    ("none", 3, ()),
    ("", 3, ()),
])
def test_parse_step_selection(text, k, expected):
    assert parse_step_selection(text, STEPS, k) == expected


_fragments = st.sampled_from([
    "{", "}", "[", "]", '"success"', "'success'", ":", ",", "true", "false", "null", "None", '"score"', "0.7",
    "85%", "7/10", '"reason"', '"x"', "```json", "```", "Status:", "Verdict:", "SUCCESS", "FAILURE", "yes",
    "no", "\n", " ", "evidence_steps", "NaN", "1e999", "-3", "\\", "：",
])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), st.lists(_fragments, max_size=40).map("".join)))
def test_parsing_never_raises(text):
    v = parse_verdict(text, STEPS)
    if v.error is None:
        assert v.success is not None and v.score is not None and 0.0 <= v.score <= 1.0
        assert v.success == (v.score >= 0.5)
    else:
        assert v.success is None
    assert set(v.cited_steps) <= STEPS
    sel = parse_step_selection(text, STEPS, 2)
    assert len(sel) <= 2 and set(sel) <= STEPS


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["success", "score", "reason", "evidence_steps", "status"]),
                       st.one_of(st.booleans(), st.floats(allow_nan=True), st.integers(),
                                 st.text(max_size=20), st.lists(st.integers(-5, 10), max_size=5), st.none())))
def test_any_json_object_gives_a_consistent_verdict(obj):
    v = parse_verdict(json.dumps(obj), STEPS)
    assert (v.error is None) == (v.success is not None)
