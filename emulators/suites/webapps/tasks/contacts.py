"""Contacts tasks: add, look up, edit, favourite, delete, count."""

from __future__ import annotations

from .base import (DELETE, Family, Params, State, WebTask, answer, app_step, change, click, digits, done, fill,
                   new_item, norm, parse_count, pick, tasks_of, walk)

_NEW_FIRST = ("Alma", "Bruno", "Cleo", "Dmitri", "Esme", "Felix", "Greta", "Hector", "Ines", "Jasper",
              "Kai", "Lucia", "Milo", "Nadia", "Otto", "Petra")
_NEW_LAST = ("Adams", "Berg", "Castillo", "Dahl", "Eriksen", "Fontaine", "Gomez", "Hartmann")


def new_name(world, rng) -> str:
    taken = {c["name"] for c in world["contacts"]}
    while True:
        name = f"{rng.choice(_NEW_FIRST)} {rng.choice(_NEW_LAST)}"
        if name not in taken:
            return name


def new_phone(rng) -> str:
    return f"(555) {rng.randint(200, 989)}-{rng.randint(1000, 9999)}"


def contact_by_name(state, name):
    return next((c for c in state["contacts"] if norm(c["name"]) == norm(name)), None)


_pick = pick("contacts", cid="id", name="name")
#: from the launcher to the contact's page
_DETAIL = (app_step("contacts"), ("contacts/{cid}", 'a.row[data-id="{cid}"]'))


def _lookup(task_id: str, template: str, field: str) -> Family:
    """Answer one field of an existing contact, read on its page."""
    def success(t: WebTask, state: State, answer: str | None) -> bool:
        if field == "phone":
            return digits(answer) == digits(t.params["value"]) != ""
        return norm(answer) == norm(t.params["value"])

    return Family(task_id, template, "medium", 8, choose=pick("contacts", cid="id", name="name", value=field),
                  success=success, milestones=("contacts", "contacts/{cid}"), route=_DETAIL,
                  oracle=walk(answer("{value}")))


def _added(t: WebTask, state: State, answer: str | None) -> bool:
    c = contact_by_name(state, t.params["name"])
    return c is not None and digits(c["phone"]) == digits(t.params["phone"])


def _deleted(t: WebTask, state: State, answer: str | None) -> bool:
    ids = [c["id"] for c in state["contacts"]]
    return t.params["cid"] not in ids and len(ids) == 23  # only that one is gone


def _phone_changed(t: WebTask, state: State, answer: str | None) -> bool:
    c = next((c for c in state["contacts"] if c["id"] == t.params["cid"]), None)
    return c is not None and norm(c["name"]) == norm(t.params["name"]) and \
        digits(c["phone"]) == digits(t.params["phone"])


def _unstar(p: Params, world: State) -> None:
    next(c for c in world["contacts"] if c["id"] == p["cid"])["starred"] = False


def _star_one(p: Params, world: State) -> None:
    if not any(c["starred"] for c in world["contacts"]):
        world["contacts"][0]["starred"] = True


FAMILIES = (
    Family("contacts_add", "Add a new contact named {name} with the phone number {phone}.", "medium", 12,
           choose=lambda world, rng: {"name": new_name(world, rng), "phone": new_phone(rng)}, success=_added,
           **new_item("contacts", "contacts/new",
                      fill({'input[name="name"]': "{name}", 'input[name="phone"]': "{phone}"}, "button.save"))),
    _lookup("contacts_phone_lookup", "What is {name}'s phone number?", "phone"),
    _lookup("contacts_email_lookup", "What is {name}'s email address?", "email"),
    Family("contacts_delete", "Delete the contact {name}.", "medium", 10, choose=_pick, success=_deleted,
           milestones=("contacts", "contacts/{cid}", done), route=_DETAIL, oracle=change(DELETE)),
    Family("contacts_edit_phone", "Change {name}'s phone number to {phone}.", "hard", 12,
           choose=lambda world, rng: {**_pick(world, rng), "phone": new_phone(rng)}, success=_phone_changed,
           milestones=("contacts/{cid}", "contacts/{cid}/edit", done),
           route=(*_DETAIL, ("contacts/{cid}/edit", "#edit")),
           oracle=change(fill({'input[name="phone"]': "{phone}"}, "button.save"))),
    Family("contacts_favourite", "Add {name} to my favourite contacts.", "medium", 8, choose=_pick, prepare=_unstar,
           success=lambda t, s, a: any(c["id"] == t.params["cid"] and c["starred"] for c in s["contacts"]),
           milestones=("contacts", "contacts/{cid}", done), route=_DETAIL, oracle=change(click("#star"))),
    Family("contacts_count_favourites", "How many favourite contacts do I have?", "medium", 6,
           choose=lambda world, rng: {"count": max(1, sum(c["starred"] for c in world["contacts"]))},
           prepare=_star_one, success=lambda t, s, a: parse_count(a) == t.params["count"],
           milestones=("contacts", "contacts?tab=fav"),
           route=(app_step("contacts"), ("contacts?tab=fav", 'a.tab[data-tab="fav"]')), oracle=walk(answer("{count}"))),
)

TASKS = tasks_of(FAMILIES, __name__)
(ContactsAdd, ContactsPhoneLookup, ContactsEmailLookup, ContactsDelete, ContactsEditPhone, ContactsFavourite,
 ContactsCountFavourites) = TASKS
