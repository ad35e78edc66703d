"""Composite tasks: read something in one app and use it in another."""

from __future__ import annotations

import random
from typing import Any

from ..world import CATEGORIES, money
from .base import (Family, Move, State, WebTask, app_step, change, digits, done, fill, norm, parse_cents, pick,
                   same_time, tasks_of)
from .messages import sent

_pick_thread = pick("threads", tid="id", name="contact")

#: the hops to a page that shows what a task looks up
_EVENT = (app_step("calendar"), ("calendar/{eid}", 'a.row[data-id="{eid}"]'))
_SUMMARY = (app_step("expenses"), ("expenses?tab=summary", 'a.tab[data-tab="summary"]'))
_CONTACT = (app_step("contacts"), ("contacts/{cid}", 'a.row[data-id="{cid}"]'))
#: the conversation with ``tid``, where the message is sent
_THREAD = (app_step("messages"), ("messages/{tid}", 'a.row[data-id="{tid}"]'))


def _send(text: str) -> Move:
    """Move on a conversation's page: send ``text`` (a template)."""
    return fill({"#composer input[name=text]": text}, "#composer button.send")


def _pick_event_and_thread(world: State, rng: random.Random) -> dict[str, Any]:
    e = rng.choice(world["events"])
    return {"eid": e["id"], "title": e["title"], "time": e["time"], **_pick_thread(world, rng)}


def _pick_category_and_thread(world: State, rng: random.Random) -> dict[str, Any]:
    cat = rng.choice(CATEGORIES)
    total = money(sum(x["amount_cents"] for x in world["expenses"] if x["category"] == cat))
    return {"category": cat, "total": total, **_pick_thread(world, rng)}


def _phone_noted(t: WebTask, state: State, answer: str | None) -> bool:
    return any(norm(n["title"]) == norm(t.params["name"]) and digits(n["body"]) == digits(t.params["phone"])
               for n in state["notes"])


def _pick_free_event(world: State, rng: random.Random) -> dict[str, Any]:
    taken = {a["time"] for a in world["alarms"]}
    e = rng.choice([e for e in world["events"] if e["time"] not in taken])
    return {"eid": e["id"], "title": e["title"], "time": e["time"]}


def _alarm_set(t: WebTask, state: State, answer: str | None) -> bool:
    return any(a["time"] == t.params["time"] and norm(a["label"]) == norm(t.params["title"]) and a["enabled"]
               for a in state["alarms"])


# Each task looks something up first (``look_first``: the hops to the page that shows it), then does the rest.
FAMILIES = (
    Family("share_event_time",
           'Look up when "{title}" starts in the Calendar and send that time to {name} in a message.', "hard", 20,
           choose=_pick_event_and_thread,
           success=lambda t, s, a: sent(s, t.params["name"], lambda text: same_time(text, t.params["time"])),
           milestones=("calendar/{eid}", "messages/{tid}", done), route=_THREAD,
           oracle=change(_send("{title} starts at {time}"), look_first=_EVENT)),
    Family("message_category_total", "Tell {name} in a message how much I have spent on {category} in total.",
           "hard", 20, choose=_pick_category_and_thread,
           success=lambda t, s, a: sent(s, t.params["name"],
                                        lambda text: parse_cents(text) == parse_cents(t.params["total"])),
           milestones=("expenses?tab=summary", "messages/{tid}", done), route=_THREAD,
           oracle=change(_send("{total} on {category}"), look_first=_SUMMARY)),
    Family("note_contact_phone", 'Create a note titled "{name}" whose text is {name}\'s phone number.', "hard", 20,
           choose=pick("contacts", cid="id", name="name", phone="phone"), success=_phone_noted,
           milestones=("contacts/{cid}", "notes/new", done), route=(app_step("notes"), ("notes/new", "#fab")),
           oracle=change(fill({'input[name="title"]': "{name}", 'textarea[name="body"]': "{phone}"}, "button.save"),
                         look_first=_CONTACT)),
    Family("alarm_for_event", 'Set an alarm at the time "{title}" starts, labelled "{title}".', "hard", 18,
           choose=_pick_free_event, success=_alarm_set,
           milestones=("calendar/{eid}", "clock/alarms/new", done),
           route=(app_step("clock"), ("clock/alarms/new", "#fab")),
           oracle=change(fill({'input[name="time"]': "{time}", 'input[name="label"]': "{title}"}, "button.save"),
                         look_first=_EVENT)),
)

TASKS = tasks_of(FAMILIES, __name__)
ShareEventTime, MessageCategoryTotal, NoteContactPhone, AlarmForEvent = TASKS
