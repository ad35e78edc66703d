"""Sweeps over every task of a suite: a fixed, named part runs by default, the rest under ``-m slow``.

The default suite has a time budget (README, "Tests"); a sweep that checks the same rule on every
task keeps the tasks that differ most in the default run (one of each app or page kind, the slowest
pages kept where they are the hard case) and runs the rest with ``-m slow``, so ``-m slow`` plus the
default run is the whole sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

#: MiniWoB++ pages whose replayed snapshot is checked by default (tests/emulators/test_snapshot_miniwob.py,
#: where the oracle also finishes each one from the restored state): a page of each kind (lists,
#: sequences, checkboxes, an animation, a dialog, tabs, dates, typing, a form, a search, the
#: autocomplete). Gymnasium's conformance check (tests/emulators/test_miniwob.py) runs by default on
#: the other pages, so the default suite still sees the oracle solve seed 0 of every page.
MINIWOB_REPLAY_DEFAULT = {"choose-list", "click-button-sequence", "click-checkboxes-large", "click-collapsible",
                          "click-dialog-2", "click-option", "click-tab", "enter-date", "enter-text-dynamic",
                          "login-user", "search-engine", "use-autocomplete"}


#: webapps tasks answered with an Answer action (information retrieval): a wrong answer must score 0
WEBAPPS_ANSWER_TASKS = {"contacts_phone_lookup", "contacts_email_lookup", "contacts_count_favourites",
                        "messages_read_last", "calendar_event_time", "calendar_count_day", "notes_read",
                        "files_size_lookup", "files_count", "expenses_category_total", "expenses_biggest",
                        "todo_count_open"}


def sweep(ids: Iterable[str], default: Iterable[str]) -> list:
    """``pytest.param`` per id: those in ``default`` unmarked, the others marked slow."""
    ids, default = list(ids), set(default)
    missing = default - set(ids)
    assert not missing, f"the default part names ids the sweep lacks: {sorted(missing)}"
    return [pytest.param(i, id=i, marks=() if i in default else pytest.mark.slow) for i in ids]


def first_of_each(ids: Iterable[str], family: Callable[[str], str] = lambda i: i.split("_")[0]) -> set[str]:
    """The first id (sorted) of each family: one task of each app for webapps ids like ``notes_create``."""
    out: dict[str, str] = {}
    for i in sorted(ids):
        out.setdefault(family(i), i)
    return set(out.values())


def _webapps_check_default() -> set[str]:
    from emulators.suites.webapps import TASKS  # lazy: only the webapps sweeps need the suite

    return first_of_each(TASKS) | WEBAPPS_ANSWER_TASKS


#: webapps tasks whose seed 0 runs through the env checks by default (tests/emulators/test_webapps_tasks.py:
#: one task of each app and every answer task); the golden record's replay of seed 0
#: (tests/emulators/test_webapps_golden.py) runs by default on the others, so the default suite runs
#: every task's oracle episode once
WEBAPPS_CHECK_DEFAULT = _webapps_check_default()
