"""Expenses tasks: add, category totals, the biggest purchase, delete."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from guiagent.types import Action, Answer

from ..world import CATEGORIES, money
from .base import (DELETE, Family, Params, State, WebTask, answer, app_step, change, done, new_item, norm,
                   parse_cents, tasks_of, walk)

if TYPE_CHECKING:
    from emulators.browser import BrowserDevice

NEW_EXPENSES = {"Groceries": "Cheese shop", "Dining": "Noodle bar", "Transport": "Ferry ticket",
                "Shopping": "Umbrella", "Bills": "Gas bill", "Entertainment": "Theatre"}


def _new_expense(world: State, rng: random.Random) -> dict[str, Any]:
    cat = rng.choice(CATEGORIES)
    cents = rng.randint(200, 9999)
    return {"title": NEW_EXPENSES[cat], "category": cat, "amount": f"{cents // 100}.{cents % 100:02d}"}


def _added(t: WebTask, state: State, answer: str | None) -> bool:
    p, cents = t.params, parse_cents(t.params["amount"])
    return any(norm(x["title"]) == norm(p["title"]) and x["category"] == p["category"] and x["amount_cents"] == cents
               for x in state["expenses"])


def _fill_expense(t: WebTask, device: BrowserDevice) -> Action | None:
    """Title and amount, then the category chip, then Save."""
    act = t.form(device, [('input[name="title"]', t.params["title"]),
                          ('input[name="amount"]', t.params["amount"])], "#never")
    if act is not None:
        return act
    checked = device.evaluate("() => (document.querySelector('input[name=category]:checked') || {}).value || null")
    if checked != t.params["category"]:
        return t.click(device, f'label.chip[data-category="{t.params["category"]}"]')
    return t.click(device, "button.save")


def _pick_category(world: State, rng: random.Random) -> dict[str, Any]:
    cat = rng.choice(CATEGORIES)
    return {"category": cat, "total": money(sum(x["amount_cents"] for x in world["expenses"] if x["category"] == cat))}


def _pick_biggest(world: State, rng: random.Random) -> dict[str, Any]:
    top = max(world["expenses"], key=lambda x: x["amount_cents"])
    return {"xid": top["id"], "title": top["title"], "amount_cents": top["amount_cents"]}


def _unique_maximum(p: Params, world: State) -> None:
    """Make the maximum unique, so the answer is."""
    for x in world["expenses"]:
        if x["id"] != p["xid"] and x["amount_cents"] >= p["amount_cents"]:
            x["amount_cents"] = p["amount_cents"] - 1


def _show_biggest(t: WebTask, device: BrowserDevice) -> Action | None:
    """Scroll until the biggest purchase is on screen, then answer."""
    act = t.click(device, f'a.row[data-id="{t.params["xid"]}"]')
    return act if act is not None and act.kind == "scroll" else Answer(t.params["title"])


def _pick_unique(world: State, rng: random.Random) -> dict[str, Any]:
    keys = [(x["title"], x["amount_cents"]) for x in world["expenses"]]
    x = rng.choice([x for x in world["expenses"] if keys.count((x["title"], x["amount_cents"])) == 1])
    return {"xid": x["id"], "title": x["title"], "amount": money(x["amount_cents"])}


FAMILIES = (
    Family("expenses_add", 'Add an expense "{title}" of ${amount} in the {category} category.', "hard", 14,
           choose=_new_expense, success=_added, **new_item("expenses", "expenses/new", _fill_expense)),
    Family("expenses_category_total", "How much did I spend on {category} in total?", "medium", 6,
           choose=_pick_category, success=lambda t, s, a: parse_cents(a) == parse_cents(t.params["total"]),
           milestones=("expenses", "expenses?tab=summary"),
           route=(app_step("expenses"), ("expenses?tab=summary", 'a.tab[data-tab="summary"]')),
           oracle=walk(answer("{total}"))),
    Family("expenses_biggest", "What was my most expensive purchase? Answer with its title.", "hard", 10,
           choose=_pick_biggest, prepare=_unique_maximum, success=lambda t, s, a: norm(a) == norm(t.params["title"]),
           milestones=("expenses",), route=(app_step("expenses"),), oracle=walk(_show_biggest)),
    Family("expenses_delete", "Delete the {title} expense of {amount}.", "medium", 12, choose=_pick_unique,
           success=lambda t, s, a: all(x["id"] != t.params["xid"] for x in s["expenses"]) and len(s["expenses"]) == 21,
           milestones=("expenses", "expenses/{xid}", done),
           route=(app_step("expenses"), ("expenses/{xid}", 'a.row[data-id="{xid}"]')), oracle=change(DELETE)),
)

TASKS = tasks_of(FAMILIES, __name__)
ExpensesAdd, ExpensesCategoryTotal, ExpensesBiggest, ExpensesDelete = TASKS
