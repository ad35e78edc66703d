"""Action formats are registered by the module that defines them, as strategies are: no list of names
and no chain of ifs in the package; get_format builds any registered name with its options."""

from __future__ import annotations

import ast
import inspect

import pytest

import grounding
from grounding import FORMAT_NAMES, get_format
from grounding.base import FORMATS, ActionFormat, register_format
from grounding.jsonfmt import JsonFormat


def test_the_names_are_the_registry_in_the_order_the_modules_register_them():
    assert FORMAT_NAMES == tuple(FORMATS) == (
        "uitars", "uitars15", "uitars2", "qwen_mobile", "qwen_computer", "qwen3_mobile", "qwen3_computer", "guiowl",
        "guiowl15", "maiui", "json", "marks")


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_registered_name_builds_the_format_of_that_name(name):
    fmt = get_format(name)
    assert isinstance(fmt, ActionFormat) and fmt.name == name


def test_options_reach_the_constructor_and_win_over_a_registered_default():
    assert get_format("qwen3_computer").frame.kind == "relative1000"  # its registered default
    assert get_format("qwen3_computer", frame="relative999").frame.kind == "relative999"
    assert get_format("marks", max_name_chars=20).max_name_chars == 20
    with pytest.raises(ValueError, match=r"unknown action format 'nope'; choose one of \('uitars', "):
        get_format("nope")


def test_the_package_holds_no_chain_of_names():
    """Adding a format is a module of its own and one registration in it: grounding/__init__.py compares
    no name (it had a branch per format, and a tuple of names to keep in step with them)."""
    tree = ast.parse(inspect.getsource(grounding))
    compared = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                and any(isinstance(c, ast.Constant) and isinstance(c.value, str) for c in n.comparators)]
    assert not compared, [ast.unparse(n) for n in compared]
    names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in FORMATS]
    assert not names, names


def test_a_format_registered_elsewhere_is_built_by_name_and_a_name_is_taken_once():
    class Terse(JsonFormat):
        name = "terse_json"

    try:
        register_format("terse_json", Terse, decimals=2)
        fmt = get_format("terse_json")
        assert isinstance(fmt, Terse) and fmt.decimals == 2
        assert get_format("terse_json", decimals=4).decimals == 4
        with pytest.raises(ValueError, match="'terse_json' is registered already"):
            register_format("terse_json", JsonFormat)
    finally:
        FORMATS.pop("terse_json", None)
    with pytest.raises(ValueError, match="unknown action format 'terse_json'"):
        get_format("terse_json")
