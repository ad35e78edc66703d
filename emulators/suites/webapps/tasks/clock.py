"""Clock tasks: add, switch and delete alarms."""

from __future__ import annotations

import random
from typing import Any

from .base import (DELETE, Family, Params, State, WebTask, app_step, change, click, done, fill, new_item, norm,
                   pick, tasks_of)

LABELS = ("Yoga", "Pick up kids", "Laundry", "Standup", "Feed the cat", "Bedtime")


def _alarm(state, aid):
    return next((a for a in state["alarms"] if a["id"] == aid), None)


def _new_alarm(world: State, rng: random.Random) -> dict[str, Any]:
    taken = {a["time"] for a in world["alarms"]}
    times = [f"{h:02d}:{m:02d}" for h in range(5, 23) for m in (0, 10, 20, 40, 50)]
    return {"time": rng.choice([t for t in times if t not in taken]), "label": rng.choice(LABELS)}


def _added(t: WebTask, state: State, answer: str | None) -> bool:
    return any(a["time"] == t.params["time"] and norm(a["label"]) == norm(t.params["label"]) and a["enabled"]
               for a in state["alarms"])


def _pick_switch(world: State, rng: random.Random) -> dict[str, Any]:
    a = rng.choice(world["alarms"])
    return {"aid": a["id"], "time": a["time"], "state": rng.choice(("on", "off"))}


def _switch_the_other_way(p: Params, world: State) -> None:
    _alarm(world, p["aid"])["enabled"] = p["state"] == "off"


def _switched(t: WebTask, state: State, answer: str | None) -> bool:
    """That alarm is on (off), and every other one as it was."""
    aid = t.params["aid"]
    a = _alarm(state, aid)
    others = [(x["id"], x["enabled"]) for x in state["alarms"] if x["id"] != aid]
    before = [(x["id"], x["enabled"]) for x in t.initial_state()["alarms"] if x["id"] != aid]
    return a is not None and a["enabled"] is (t.params["state"] == "on") and others == before


FAMILIES = (
    Family("clock_add_alarm", 'Set an alarm for {time} with the label "{label}".', "medium", 12,
           choose=_new_alarm, success=_added,
           **new_item("clock", "clock/alarms/new",
                      fill({'input[name="time"]': "{time}", 'input[name="label"]': "{label}"}, "button.save"))),
    Family("clock_switch_alarm", "Turn {state} the {time} alarm.", "easy", 6, choose=_pick_switch,
           prepare=_switch_the_other_way, success=_switched, milestones=("clock", done), route=(app_step("clock"),),
           oracle=change(click('li[data-id="{aid}"] button.switch'))),
    Family("clock_delete_alarm", "Delete the {time} alarm.", "medium", 10, choose=pick("alarms", aid="id", time="time"),
           success=lambda t, s, a: _alarm(s, t.params["aid"]) is None and len(s["alarms"]) == 4,
           milestones=("clock", "clock/alarms/{aid}", done),
           route=(app_step("clock"), ("clock/alarms/{aid}", 'a[data-edit="{aid}"]')), oracle=change(DELETE)),
)

TASKS = tasks_of(FAMILIES, __name__)
ClockAddAlarm, ClockSwitchAlarm, ClockDeleteAlarm = TASKS
