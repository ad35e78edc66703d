"""The phone apps: one blueprint under ``/s/<sid>/``, server-rendered pages over the session state.

Pages are GETs (each is logged in the session's ``log`` so tasks can tell which
screens were visited). Every change is a POST made by ``static/app.js`` with
``fetch``; it answers JSON: ``{"redirect": url, "replace": bool}`` to move on,
``{"reload": true}``, ``{"checked": bool}`` for switches, or
``{"errors": {field: message}}`` for a form that was not accepted (nothing saved).
"""

from __future__ import annotations

import re
from itertools import groupby
from typing import Any, Callable

from flask import Blueprint, abort, current_app, g, jsonify, render_template, request

from .icons import APP_ICONS, icon
from .world import (APP_TITLES, APPS, CATEGORIES, CLOCK_TABS, FOLDERS, FONT_SIZES, RINGTONES,
                    SCREEN_TIMEOUTS, SETTINGS_SECTIONS, SETTINGS_TOGGLES, copy_json, money, next_id,
                    pretty_date)

bp = Blueprint("apps", __name__, url_prefix="/s/<sid>")

NOW = "12:30"  # the phone's clock (fixed, like TODAY, so screens are reproducible)
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MONEY = re.compile(r"^\$?\s*(\d{1,6})(?:[.,](\d{1,2}))?$")


def _store():
    return current_app.config["STORE"]


@bp.url_value_preprocessor
def _pull_sid(endpoint: str | None, values: dict[str, Any] | None) -> None:
    g.sid = (values or {}).pop("sid", None)


@bp.before_request
def _known_session():
    if g.sid not in _store():
        abort(404, description=f"unknown session {g.sid!r}: create one through /api/sessions")


def u(path: str = "") -> str:
    """Absolute path of a page of this session."""
    return f"/s/{g.sid}/{path}"


def page(template: str, **context: Any) -> str:
    """Render a page over a snapshot of the state; log the view and pop the snackbar message."""
    rel = request.full_path.split(f"/s/{g.sid}/", 1)[1].rstrip("?")
    with _store().edit(g.sid) as st:
        st["log"] = (st["log"] + [rel])[-200:]
        flash, st["flash"] = st["flash"], None
        snap = copy_json(st)
    labels = snap.get("labels") or {}

    def shown(name: Any) -> Any:
        """The name a screen shows for ``name`` (the world's ``labels`` rename some targets)."""
        return labels.get(name, name) if isinstance(name, str) else name

    return render_template(template, S=snap, flash=flash, u=u, now=NOW, money=money, pretty_date=pretty_date,
                           app_titles={k: shown(v) for k, v in APP_TITLES.items()}, app_icons=APP_ICONS,
                           icon=icon, request=request, shown=shown, **context)


def mutate(fn: Callable[[dict[str, Any]], Any]) -> Any:
    with _store().edit(g.sid) as st:
        return fn(st)


def find(items: list[dict[str, Any]], item_id: int) -> dict[str, Any]:
    for item in items:
        if item["id"] == item_id:
            return item
    abort(404)


def done(redirect: str | None = None, *, flash: str | None = None, replace: bool = True, **extra: Any):
    if flash:
        mutate(lambda st: st.__setitem__("flash", flash))
    body: dict[str, Any] = dict(extra)
    if redirect is not None:
        body.update(redirect=redirect, replace=replace)
    return jsonify(body)


def form_errors(**errors: str | None):
    errs = {k: v for k, v in errors.items() if v}
    return (jsonify(errors=errs), 422) if errs else None


def field(name: str) -> str:
    return (request.form.get(name) or "").strip()


def _required(value: str, label: str) -> str | None:
    return None if value else f"{label} is required"


def _time_error(value: str) -> str | None:
    return None if _TIME.match(value) else "Enter a time as HH:MM, e.g. 07:30"


def _norm_time(value: str) -> str:
    h, m = value.split(":")
    return f"{int(h):02d}:{m}"


# --- launcher ----------------------------------------------------------------------------------

@bp.get("/")
def launcher():
    return page("launcher.html", apps=APPS)


# --- contacts ----------------------------------------------------------------------------------

@bp.get("/contacts")
def contacts():
    tab = request.args.get("tab", "all")
    return page("contacts.html", tab=tab)


@bp.route("/contacts/new", methods=["GET", "POST"])
@bp.route("/contacts/<int:cid>/edit", methods=["GET", "POST"])
def contact_form(cid: int | None = None):
    if request.method == "GET":
        contact = find(_store().get(g.sid)["contacts"], cid) if cid else None
        return page("contact_form.html", contact=contact)
    name, phone, email = field("name"), field("phone"), field("email")
    bad = form_errors(name=_required(name, "Name"),
                      phone=None if not phone or re.fullmatch(r"[\d\s()+\-.]{3,20}", phone) else "Not a phone number")
    if bad:
        return bad

    def save(st):
        if cid:
            c = find(st["contacts"], cid)
            c.update(name=name, phone=phone, email=email)
            return cid
        new = {"id": next_id(st["contacts"]), "name": name, "phone": phone, "email": email, "starred": False}
        st["contacts"].append(new)
        st["contacts"].sort(key=lambda c: c["name"].lower())
        return new["id"]
    new_id = mutate(save)
    return done(u(f"contacts/{new_id}"), flash="Contact saved")


@bp.get("/contacts/<int:cid>")
def contact(cid: int):
    c = find(_store().get(g.sid)["contacts"], cid)
    return page("contact.html", c=c)


@bp.post("/contacts/<int:cid>/star")
def contact_star(cid: int):
    value = request.form.get("value") == "true"
    mutate(lambda st: find(st["contacts"], cid).__setitem__("starred", value))
    return jsonify(checked=value)


@bp.post("/contacts/<int:cid>/delete")
def contact_delete(cid: int):
    mutate(lambda st: st["contacts"].remove(find(st["contacts"], cid)))
    return done(u("contacts"), flash="Contact deleted", pop=True)


# --- messages ----------------------------------------------------------------------------------

@bp.get("/messages")
def messages():
    return page("messages.html")


def _send(st: dict[str, Any], contact_name: str, text: str) -> int:
    msg = {"from_me": True, "text": text, "time": NOW}
    for i, t in enumerate(st["threads"]):
        if t["contact"].lower() == contact_name.lower():
            t["messages"].append(msg)
            st["threads"].insert(0, st["threads"].pop(i))  # most recent conversation first
            return t["id"]
    tid = next_id(st["threads"])
    st["threads"].insert(0, {"id": tid, "contact": contact_name, "messages": [msg]})
    return tid


@bp.route("/messages/new", methods=["GET", "POST"])
def message_new():
    if request.method == "GET":
        return page("message_new.html")
    to, text = field("to"), field("text")
    names = {c["name"].lower(): c["name"] for c in _store().get(g.sid)["contacts"]}
    bad = form_errors(to=_required(to, "Recipient") or (None if to.lower() in names else f"No contact named {to}"),
                      text=_required(text, "Message"))
    if bad:
        return bad
    tid = mutate(lambda st: _send(st, names[to.lower()], text))
    return done(u(f"messages/{tid}"))


@bp.route("/messages/<int:tid>", methods=["GET", "POST"])
def thread(tid: int):
    if request.method == "GET":
        return page("thread.html", t=find(_store().get(g.sid)["threads"], tid))
    text = field("text")
    bad = form_errors(text=_required(text, "Message"))
    if bad:
        return bad
    mutate(lambda st: _send(st, find(st["threads"], tid)["contact"], text))
    return done(reload=True)


@bp.post("/messages/<int:tid>/delete")
def thread_delete(tid: int):
    mutate(lambda st: st["threads"].remove(find(st["threads"], tid)))
    return done(u("messages"), flash="Conversation deleted", pop=True)


# --- calendar ----------------------------------------------------------------------------------

@bp.get("/calendar")
def calendar():
    events = sorted(_store().get(g.sid)["events"], key=lambda e: (e["date"], e["time"]))
    days = [(d, list(es)) for d, es in groupby(events, key=lambda e: e["date"])]
    return page("calendar.html", days=days)


@bp.route("/calendar/new", methods=["GET", "POST"])
@bp.route("/calendar/<int:eid>/edit", methods=["GET", "POST"])
def event_form(eid: int | None = None):
    if request.method == "GET":
        ev = find(_store().get(g.sid)["events"], eid) if eid else None
        return page("event_form.html", ev=ev)
    title, date_, time_, loc = field("title"), field("date"), field("time"), field("location")
    bad = form_errors(title=_required(title, "Title"),
                      date=None if _DATE.match(date_) else "Enter a date as YYYY-MM-DD",
                      time=_time_error(time_))
    if bad:
        return bad
    values = {"title": title, "date": date_, "time": _norm_time(time_), "location": loc}

    def save(st):
        if eid:
            find(st["events"], eid).update(values)
            return eid
        new_id = next_id(st["events"])
        st["events"].append({"id": new_id, **values})
        return new_id
    new_id = mutate(save)
    return done(u(f"calendar/{new_id}"), flash="Event saved")


@bp.get("/calendar/<int:eid>")
def event(eid: int):
    return page("event.html", ev=find(_store().get(g.sid)["events"], eid))


@bp.post("/calendar/<int:eid>/delete")
def event_delete(eid: int):
    mutate(lambda st: st["events"].remove(find(st["events"], eid)))
    return done(u("calendar"), flash="Event deleted", pop=True)


# --- notes -------------------------------------------------------------------------------------

@bp.get("/notes")
def notes():
    return page("notes.html")


@bp.route("/notes/new", methods=["GET", "POST"])
@bp.route("/notes/<int:nid>", methods=["GET", "POST"])
def note(nid: int | None = None):
    if request.method == "GET":
        n = find(_store().get(g.sid)["notes"], nid) if nid else None
        return page("note.html", n=n)
    title, body = field("title"), field("body")
    bad = form_errors(title=_required(title, "Title"))
    if bad:
        return bad

    def save(st):
        if nid:
            find(st["notes"], nid).update(title=title, body=body)
        else:
            st["notes"].insert(0, {"id": next_id(st["notes"]), "title": title, "body": body})
    mutate(save)
    return done(u("notes"), flash="Note saved", pop=True)


@bp.post("/notes/<int:nid>/delete")
def note_delete(nid: int):
    mutate(lambda st: st["notes"].remove(find(st["notes"], nid)))
    return done(u("notes"), flash="Note deleted", pop=True)


# --- settings ----------------------------------------------------------------------------------

@bp.get("/settings")
def settings():
    return page("settings.html", toggles=SETTINGS_TOGGLES, sections=SETTINGS_SECTIONS)


@bp.get("/settings/<section>")
def settings_section(section: str):
    if section not in SETTINGS_SECTIONS:
        abort(404)
    return page(f"settings_{section}.html", title=SETTINGS_SECTIONS[section], font_sizes=FONT_SIZES,
                timeouts=SCREEN_TIMEOUTS, ringtones=RINGTONES)


_SETTING_CHOICES: dict[str, tuple[str, ...] | None] = {
    "font_size": FONT_SIZES, "screen_timeout": SCREEN_TIMEOUTS, "ringtone": RINGTONES, "device_name": None,
}
_SETTING_SWITCHES = (*SETTINGS_TOGGLES, "dark_theme", "vibrate")


@bp.post("/settings/set/<key>")
def settings_set(key: str):
    value = field("value")
    if key in _SETTING_SWITCHES:
        on = value == "true"
        mutate(lambda st: st["settings"].__setitem__(key, on))
        return jsonify(checked=on)
    if key not in _SETTING_CHOICES:
        abort(404)
    choices = _SETTING_CHOICES[key]
    bad = form_errors(value=_required(value, "Value") or
                      (None if choices is None or value in choices else f"choose one of {', '.join(choices)}"))
    if bad:
        return bad
    mutate(lambda st: st["settings"].__setitem__(key, value))
    if choices is None:
        return done(reload=True)
    return jsonify(checked=True, key=key, value=value)  # radios update in place


# --- files -------------------------------------------------------------------------------------

@bp.get("/files")
def files():
    return page("files.html", folders=FOLDERS)


def _file_order(rows: list[dict[str, Any]], layout: dict[str, Any]) -> list[dict[str, Any]]:
    """A folder's files as it lists them: by name, or in the ``files`` order of a shuffled layout
    (a file renamed to a name the layout does not hold after those it does)."""
    order = {name: i for i, name in enumerate(layout.get("files") or ())}
    return sorted(rows, key=lambda f: (order.get(f["name"], len(order)), f["name"]))


@bp.get("/files/<folder>")
def folder(folder: str):
    if folder not in FOLDERS:
        abort(404)
    return page("folder.html", folder=folder, file_order=_file_order)


@bp.get("/files/<folder>/<int:fid>")
def file_info(folder: str, fid: int):
    f = find(_store().get(g.sid)["files"], fid)
    return page("file.html", f=f)


@bp.post("/files/<int:fid>/rename")
def file_rename(fid: int):
    name = field("name")
    st = _store().get(g.sid)
    f = find(st["files"], fid)
    taken = any(o["name"] == name and o["folder"] == f["folder"] and o["id"] != fid for o in st["files"])
    bad = form_errors(name=_required(name, "Name") or ("A file with this name exists" if taken else None)
                      or ("Names cannot contain /" if "/" in name else None))
    if bad:
        return bad
    mutate(lambda st: find(st["files"], fid).__setitem__("name", name))
    return done(reload=True, flash="File renamed")


@bp.post("/files/<int:fid>/delete")
def file_delete(fid: int):
    f = find(_store().get(g.sid)["files"], fid)
    mutate(lambda st: st["files"].remove(find(st["files"], fid)))
    return done(u(f"files/{f['folder']}"), flash="File deleted", pop=True)


# --- expenses ----------------------------------------------------------------------------------

@bp.get("/expenses")
def expenses():
    st = _store().get(g.sid)
    totals = {c: sum(e["amount_cents"] for e in st["expenses"] if e["category"] == c) for c in CATEGORIES}
    return page("expenses.html", tab=request.args.get("tab", "list"), totals=totals,
                total=sum(totals.values()))


def _cents(text: str) -> int | None:
    m = _MONEY.match(text.replace(" ", ""))
    if not m:
        return None
    frac = (m.group(2) or "0").ljust(2, "0")
    return int(m.group(1)) * 100 + int(frac)


@bp.route("/expenses/new", methods=["GET", "POST"])
def expense_new():
    if request.method == "GET":
        return page("expense_form.html", categories=CATEGORIES)
    title, amount, category, date_ = field("title"), field("amount"), field("category"), field("date")
    cents = _cents(amount)
    bad = form_errors(title=_required(title, "Title"),
                      amount=None if cents else "Enter an amount such as 12.50",
                      category=None if category in CATEGORIES else "Choose a category",
                      date=None if _DATE.match(date_) else "Enter a date as YYYY-MM-DD")
    if bad:
        return bad

    def save(st):
        st["expenses"].insert(0, {"id": next_id(st["expenses"]), "title": title, "category": category,
                                  "amount_cents": cents, "date": date_})
    mutate(save)
    return done(u("expenses"), flash="Expense added", pop=True)


@bp.get("/expenses/<int:xid>")
def expense(xid: int):
    return page("expense.html", x=find(_store().get(g.sid)["expenses"], xid))


@bp.post("/expenses/<int:xid>/delete")
def expense_delete(xid: int):
    mutate(lambda st: st["expenses"].remove(find(st["expenses"], xid)))
    return done(u("expenses"), flash="Expense deleted", pop=True)


# --- clock -------------------------------------------------------------------------------------

@bp.get("/clock")
def clock():
    tab = request.args.get("tab", "alarm")
    if tab not in CLOCK_TABS:
        abort(404)
    return page("clock.html", tab=tab, tabs=CLOCK_TABS)


@bp.route("/clock/alarms/new", methods=["GET", "POST"])
@bp.route("/clock/alarms/<int:aid>", methods=["GET", "POST"])
def alarm_form(aid: int | None = None):
    if request.method == "GET":
        a = find(_store().get(g.sid)["alarms"], aid) if aid else None
        return page("alarm_form.html", a=a)
    time_, label = field("time"), field("label")
    bad = form_errors(time=_time_error(time_))
    if bad:
        return bad

    def save(st):
        if aid:
            find(st["alarms"], aid).update(time=_norm_time(time_), label=label)
        else:
            st["alarms"].append({"id": next_id(st["alarms"]), "time": _norm_time(time_), "label": label,
                                 "enabled": True})
        st["alarms"].sort(key=lambda a: a["time"])
    mutate(save)
    return done(u("clock"), flash="Alarm saved", pop=True)


@bp.post("/clock/alarms/<int:aid>/toggle")
def alarm_toggle(aid: int):
    value = request.form.get("value") == "true"
    mutate(lambda st: find(st["alarms"], aid).__setitem__("enabled", value))
    return jsonify(checked=value)


@bp.post("/clock/alarms/<int:aid>/delete")
def alarm_delete(aid: int):
    mutate(lambda st: st["alarms"].remove(find(st["alarms"], aid)))
    return done(u("clock"), flash="Alarm deleted", pop=True)


# --- tasks (to-do) -----------------------------------------------------------------------------

@bp.get("/tasks")
def todos():
    return page("tasks.html")


@bp.post("/tasks/add")
def todo_add():
    title = field("title")
    bad = form_errors(title=_required(title, "Task"))
    if bad:
        return bad
    mutate(lambda st: st["todos"].append({"id": next_id(st["todos"]), "title": title, "done": False}))
    return done(reload=True)


@bp.post("/tasks/<int:tid>/toggle")
def todo_toggle(tid: int):
    value = request.form.get("value") == "true"
    mutate(lambda st: find(st["todos"], tid).__setitem__("done", value))
    return jsonify(checked=value)


@bp.post("/tasks/clear")
def todo_clear():
    def clear(st):
        n = sum(t["done"] for t in st["todos"])
        st["todos"] = [t for t in st["todos"] if not t["done"]]
        return n
    n = mutate(clear)
    return done(reload=True, flash=f"{n} completed task{'s' if n != 1 else ''} deleted")
