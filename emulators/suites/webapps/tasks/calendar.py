"""Calendar tasks: create, look up, count, reschedule, delete events."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from guiagent.types import Action, Answer

from ..world import TODAY, pretty_date
from .base import (DELETE, Family, State, WebTask, answer, app_step, change, done, fill, new_item, norm,
                   parse_count, pick, same_time, tasks_of, walk)

if TYPE_CHECKING:
    from emulators.browser import BrowserDevice

NEW_TITLES = ("Team lunch", "Call with the bank", "School play", "Tennis match", "Dinner with Sam",
              "Museum visit", "Bike repair", "Study group")


def _event(state, eid):
    return next((e for e in state["events"] if e["id"] == eid), None)


_pick = pick("events", eid="id", title="title", time="time", date="date")
#: from the launcher to the event's page
_EVENT = (app_step("calendar"), ("calendar/{eid}", 'a.row[data-id="{eid}"]'))


def _new_event(world: State, rng: random.Random) -> dict[str, Any]:
    day = TODAY + timedelta(days=rng.randint(1, 13))
    return {"title": rng.choice(NEW_TITLES), "date": day.isoformat(),
            "time": f"{rng.randint(8, 19):02d}:{rng.choice((0, 30)):02d}"}


def _added(t: WebTask, state: State, answer: str | None) -> bool:
    p = t.params
    return any(norm(e["title"]) == norm(p["title"]) and e["date"] == p["date"] and e["time"] == p["time"]
               for e in state["events"])


def _pick_day(world: State, rng: random.Random) -> dict[str, Any]:
    d = rng.choice(sorted({e["date"] for e in world["events"]}))
    return {"date": d, "day": pretty_date(d), "count": sum(e["date"] == d for e in world["events"])}


def _count_day(t: WebTask, device: BrowserDevice) -> Action | None:
    """Scroll until the day's last event is on screen, then answer."""
    last = device.evaluate(
        "(d) => { const l = document.querySelector(`ul[data-date='${d}']`); "
        "const rows = l ? l.querySelectorAll('a.row') : []; return rows.length ? rows[rows.length - 1].dataset.id : null; }",
        t.params["date"])
    act = t.click(device, f'a.row[data-id="{last}"]')
    return act if act is not None and act.kind == "scroll" else Answer(str(t.params["count"]))


def _pick_new_time(world: State, rng: random.Random) -> dict[str, Any]:
    p = _pick(world, rng)
    options = [f"{h:02d}:{m:02d}" for h in range(8, 21) for m in (0, 30) if f"{h:02d}:{m:02d}" != p["time"]]
    return {**p, "new_time": rng.choice(options)}


def _rescheduled(t: WebTask, state: State, answer: str | None) -> bool:
    e, p = _event(state, t.params["eid"]), t.params
    return (e is not None and e["time"] == p["new_time"] and e["date"] == p["date"]
            and norm(e["title"]) == norm(p["title"]))


FAMILIES = (
    Family("calendar_add_event", 'Create a calendar event "{title}" on {date} at {time}.', "hard", 15,
           choose=_new_event, success=_added,
           **new_item("calendar", "calendar/new", fill({
               'input[name="title"]': "{title}", 'input[name="date"]': "{date}", 'input[name="time"]': "{time}"},
               "button.save"))),
    Family("calendar_event_time", 'At what time does "{title}" start?', "medium", 8, choose=_pick,
           success=lambda t, s, a: same_time(a, t.params["time"]), milestones=("calendar", "calendar/{eid}"),
           route=_EVENT, oracle=walk(answer("{time}"))),
    Family("calendar_count_day", "How many events do I have on {day}?", "medium", 8, choose=_pick_day,
           success=lambda t, s, a: parse_count(a) == t.params["count"], milestones=("calendar",),
           route=(app_step("calendar"),), oracle=walk(_count_day)),
    Family("calendar_reschedule", 'Move "{title}" to {new_time} on the same day.', "hard", 12,
           choose=_pick_new_time, success=_rescheduled, milestones=("calendar/{eid}", "calendar/{eid}/edit", done),
           route=(*_EVENT, ("calendar/{eid}/edit", "#edit")),
           oracle=change(fill({'input[name="time"]': "{new_time}"}, "button.save"))),
    Family("calendar_delete_event", 'Delete the event "{title}" from my calendar.', "medium", 10, choose=_pick,
           success=lambda t, s, a: _event(s, t.params["eid"]) is None and len(s["events"]) == 15,
           milestones=("calendar", "calendar/{eid}", done), route=_EVENT, oracle=change(DELETE)),
)

TASKS = tasks_of(FAMILIES, __name__)
CalendarAddEvent, CalendarEventTime, CalendarCountDay, CalendarReschedule, CalendarDeleteEvent = TASKS
