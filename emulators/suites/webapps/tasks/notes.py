"""Notes tasks: create, read, rename, delete."""

from __future__ import annotations

import random
from typing import Any

from .base import (DELETE, Family, State, WebTask, answer, app_step, change, done, fill, new_item, norm, pick,
                   tasks_of, walk)

NEW_NOTES = (("Holiday ideas", "Visit the lakes and rent a canoe"), ("Birthday plan", "Cake at four, games after"),
             ("Doctor questions", "Ask about the knee and the new pills"), ("Movies", "Watch Arrival and Amelie"),
             ("Moving day", "Book the van for Saturday morning"), ("Bike parts", "New chain and brake pads"))
RENAMES = ("Important", "Archive", "To review", "Old ideas", "Keep", "Later")


def _note(state, nid):
    return next((n for n in state["notes"] if n["id"] == nid), None)


_pick = pick("notes", nid="id", title="title", body="body")
#: from the launcher to the note's page
_NOTE = (app_step("notes"), ("notes/{nid}", 'a.card[data-id="{nid}"]'))


def _new_note(world: State, rng: random.Random) -> dict[str, Any]:
    title, body = rng.choice(NEW_NOTES)
    return {"title": title, "body": body}


def _created(t: WebTask, state: State, answer: str | None) -> bool:
    return any(norm(n["title"]) == norm(t.params["title"]) and norm(n["body"]) == norm(t.params["body"])
               for n in state["notes"])


def _renamed(t: WebTask, state: State, answer: str | None) -> bool:
    n = _note(state, t.params["nid"])
    return n is not None and norm(n["title"]) == norm(t.params["new_title"]) and \
        norm(n["body"]) == norm(t.params["body"])


FAMILIES = (
    Family("notes_create", 'Create a note titled "{title}" with the text "{body}".', "medium", 12,
           choose=_new_note, success=_created,
           **new_item("notes", "notes/new",
                      fill({'input[name="title"]': "{title}", 'textarea[name="body"]': "{body}"}, "button.save"))),
    Family("notes_read", 'What does my note "{title}" say?', "medium", 8, choose=_pick,
           success=lambda t, s, a: norm(a) == norm(t.params["body"]), milestones=("notes", "notes/{nid}"),
           route=_NOTE, oracle=walk(answer("{body}"))),
    Family("notes_rename", 'Rename the note "{title}" to "{new_title}".', "hard", 10,
           choose=lambda world, rng: {**_pick(world, rng), "new_title": rng.choice(RENAMES)}, success=_renamed,
           milestones=("notes", "notes/{nid}", done), route=_NOTE,
           oracle=change(fill({'input[name="title"]': "{new_title}"}, "button.save"))),
    Family("notes_delete", 'Delete the note "{title}".', "medium", 10, choose=_pick,
           success=lambda t, s, a: _note(s, t.params["nid"]) is None and len(s["notes"]) == 7,
           milestones=("notes", "notes/{nid}", done), route=_NOTE, oracle=change(DELETE)),
)

TASKS = tasks_of(FAMILIES, __name__)
NotesCreate, NotesRead, NotesRename, NotesDelete = TASKS
