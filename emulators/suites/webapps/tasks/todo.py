"""Tasks-app (to-do list) tasks: add, complete, count, clear completed."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from guiagent.types import Action, Answer

from .base import (Family, Params, State, WebTask, app_step, change, click, confirm, done, fill, norm, parse_count,
                   pick, tasks_of, walk)

if TYPE_CHECKING:
    from emulators.browser import BrowserDevice

NEW_TODOS = ("Buy batteries", "Call grandma", "Book a dentist visit", "Wash the car", "Pay the phone bill",
             "Print the tickets")


def _reopen(p: Params, world: State) -> None:
    next(t for t in world["todos"] if t["id"] == p["tid"])["done"] = False


def _count_open(t: WebTask, device: BrowserDevice) -> Action | None:
    """Scroll until the last task is on screen, then answer."""
    last = device.evaluate("() => { const r = document.querySelectorAll('li.row[data-id]'); "
                           "return r.length ? r[r.length - 1].dataset.id : null; }")
    act = t.click(device, f'li[data-id="{last}"]') if last else None
    return act if act is not None and act.kind == "scroll" else Answer(str(t.params["count"]))


def _pick_open(world: State, rng: random.Random) -> dict[str, Any]:
    open_ids = sorted(t["id"] for t in world["todos"] if not t["done"])
    if len(open_ids) == len(world["todos"]):  # keep at least one completed task to clear
        open_ids.remove(world["todos"][0]["id"])
    return {"open": open_ids}


def _complete_all_but_open(p: Params, world: State) -> None:
    for t in world["todos"]:
        t["done"] = t["id"] not in p["open"]


# every task here is done on the app's one screen
FAMILIES = (
    Family("todo_add", 'Add "{title}" to my tasks.', "easy", 6,
           choose=lambda world, rng: {"title": rng.choice(NEW_TODOS)},
           success=lambda t, s, a: any(norm(x["title"]) == norm(t.params["title"]) and not x["done"]
                                       for x in s["todos"]),
           milestones=("tasks", done), route=(app_step("tasks"),),
           oracle=change(fill({'#add-form input[name="title"]': "{title}"}, "#add"))),
    Family("todo_complete", 'Mark the task "{title}" as done.', "easy", 6,
           choose=pick("todos", tid="id", title="title"),
           prepare=_reopen, success=lambda t, s, a: any(x["id"] == t.params["tid"] and x["done"] for x in s["todos"]),
           milestones=("tasks", done), route=(app_step("tasks"),),
           oracle=change(click('li[data-id="{tid}"] button.check'))),
    Family("todo_count_open", "How many of my tasks are not done yet?", "medium", 6,
           choose=lambda world, rng: {"count": sum(not t["done"] for t in world["todos"])},
           success=lambda t, s, a: parse_count(a) == t.params["count"], milestones=("tasks",),
           route=(app_step("tasks"),), oracle=walk(_count_open)),
    Family("todo_clear_completed", "Delete all the tasks I have completed.", "medium", 6, choose=_pick_open,
           prepare=_complete_all_but_open,
           success=lambda t, s, a: sorted(x["id"] for x in s["todos"]) == t.params["open"],
           milestones=("tasks", done), route=(app_step("tasks"),), oracle=change(confirm("confirm-clear", "#clear"))),
)

TASKS = tasks_of(FAMILIES, __name__)
TodoAdd, TodoComplete, TodoCountOpen, TodoClearCompleted = TASKS
