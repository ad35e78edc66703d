"""Messages tasks: reply, start a conversation, read, delete."""

from __future__ import annotations

import random
from typing import Any

from .base import (DELETE, Family, State, WebTask, answer, app_step, change, done, fill, new_item, norm, pick,
                   tasks_of, walk)

TEXTS = ("I'll call you tonight", "See you at the station", "Thanks for the help", "Running ten minutes late",
         "Can we move lunch to Friday", "The package arrived", "Happy birthday", "Let's meet at noon")


def thread_of(state, name):
    return next((t for t in state["threads"] if norm(t["contact"]) == norm(name)), None)


def sent(state, name, predicate) -> bool:
    t = thread_of(state, name)
    return t is not None and any(m["from_me"] and predicate(m["text"]) for m in t["messages"])


_pick = pick("threads", tid="id", name="contact")
#: from the launcher to the conversation's page
_THREAD = (app_step("messages"), ("messages/{tid}", 'a.row[data-id="{tid}"]'))


def _text_sent(t: WebTask, state: State, answer: str | None) -> bool:
    return sent(state, t.params["name"], lambda text: norm(text) == norm(t.params["text"]))


def _pick_stranger(world: State, rng: random.Random) -> dict[str, Any]:
    talked = {t["contact"] for t in world["threads"]}
    c = rng.choice([c for c in world["contacts"] if c["name"] not in talked])
    return {"name": c["name"], "text": rng.choice(TEXTS)}


def _pick_last_received(world: State, rng: random.Random) -> dict[str, Any]:
    p = _pick(world, rng)
    t = next(t for t in world["threads"] if t["id"] == p["tid"])
    return {**p, "text": [m for m in t["messages"] if not m["from_me"]][-1]["text"]}


FAMILIES = (
    Family("messages_reply", 'Reply to {name} with the message "{text}".', "medium", 10,
           choose=lambda world, rng: {**_pick(world, rng), "text": rng.choice(TEXTS)}, success=_text_sent,
           milestones=("messages", "messages/{tid}", done), route=_THREAD,
           oracle=change(fill({"#composer input[name=text]": "{text}"}, "#composer button.send"))),
    Family("messages_new", 'Send a message to {name} saying "{text}".', "hard", 12, choose=_pick_stranger,
           success=_text_sent,
           **new_item("messages", "messages/new",
                      fill({'input[name="to"]': "{name}", 'textarea[name="text"]': "{text}"}, "button.save"))),
    Family("messages_read_last", "What was the last message {name} sent me?", "medium", 8,
           choose=_pick_last_received, success=lambda t, s, a: norm(a) == norm(t.params["text"]),
           milestones=("messages", "messages/{tid}"), route=_THREAD, oracle=walk(answer("{text}"))),
    Family("messages_delete_thread", "Delete my conversation with {name}.", "medium", 10, choose=_pick,
           success=lambda t, s, a: thread_of(s, t.params["name"]) is None and len(s["threads"]) == 7,
           milestones=("messages", "messages/{tid}", done), route=_THREAD, oracle=change(DELETE)),
)

TASKS = tasks_of(FAMILIES, __name__)
MessagesReply, MessagesNew, MessagesReadLast, MessagesDeleteThread = TASKS
