"""Deterministic app data ("the world") of one episode, generated from a seed.

A world is a plain JSON-serialisable dict: what every app of the phone holds
(contacts, message threads, calendar events, notes, settings, files, expenses,
alarms, to-dos). Tasks draw their parameters from a world made from a seed they
sampled, then may edit a copy of it before it is loaded into a server session.

Example::

    >>> w = make_world(7)
    >>> w == make_world(7) and len(w["contacts"]) == CONTACT_COUNT
    True
"""

from __future__ import annotations

import functools
import json
import random
from datetime import date, timedelta
from typing import Any

__all__ = [
    "APPS", "APP_TITLES", "SETTINGS_TOGGLES", "SETTINGS_SECTIONS", "FOLDERS", "CATEGORIES",
    "RINGTONES", "FONT_SIZES", "SCREEN_TIMEOUTS", "CLOCK_TABS", "TODAY", "CONTACT_COUNT",
    "make_world", "empty_world", "money", "pretty_date", "next_id", "LAYOUT_LISTS", "shuffled_layout",
    "check_layout", "copy_json", "HELD_OUT_TARGETS", "held_out_names", "target_name", "check_labels",
    "phone_names",
]

#: app slugs in launcher order (fixed: easy tasks rely on the icons' places)
APPS: tuple[str, ...] = ("contacts", "messages", "calendar", "notes", "settings", "files",
                         "expenses", "clock", "tasks")
APP_TITLES: dict[str, str] = {
    "contacts": "Contacts", "messages": "Messages", "calendar": "Calendar", "notes": "Notes",
    "settings": "Settings", "files": "Files", "expenses": "Expenses", "clock": "Clock", "tasks": "Tasks",
}
#: quick toggles on the Settings home screen, in row order: key -> label
SETTINGS_TOGGLES: dict[str, str] = {
    "wifi": "Wi-Fi", "bluetooth": "Bluetooth", "airplane": "Airplane mode",
    "location": "Location", "dnd": "Do not disturb",
}
#: sections below the toggles, in row order: slug -> label
SETTINGS_SECTIONS: dict[str, str] = {
    "display": "Display", "sound": "Sound", "storage": "Storage", "about": "About phone",
}
FOLDERS: tuple[str, ...] = ("Documents", "Downloads", "Pictures", "Music")
CATEGORIES: tuple[str, ...] = ("Groceries", "Dining", "Transport", "Shopping", "Bills", "Entertainment")
RINGTONES: tuple[str, ...] = ("Chime", "Classic bell", "Marimba", "Ocean", "Pebble", "Sunrise")
FONT_SIZES: tuple[str, ...] = ("Small", "Default", "Large")
SCREEN_TIMEOUTS: tuple[str, ...] = ("30 seconds", "1 minute", "5 minutes", "10 minutes")
CLOCK_TABS: dict[str, str] = {"alarm": "Alarm", "clock": "Clock", "timer": "Timer", "stopwatch": "Stopwatch"}
#: the phone's "today"; fixed so that screens and answers do not depend on the wall clock
TODAY = date(2025, 6, 2)
CONTACT_COUNT = 24

_FIRST = ("Ann", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Irene", "Jonas", "Kira",
          "Liam", "Maya", "Nina", "Oscar", "Paula", "Quentin", "Rosa", "Sam", "Tara", "Umar", "Vera",
          "Walter", "Xenia", "Yusuf", "Zoe", "Aaron", "Bella", "Chen", "Dora", "Emil", "Fatima",
          "Gabriel", "Hana", "Ivan", "Julia", "Kofi", "Lena", "Marco", "Noor")
_LAST = ("Lee", "Novak", "Garcia", "Smith", "Okafor", "Rossi", "Tanaka", "Muller", "Dubois", "Silva",
         "Kowalski", "Haddad", "Nguyen", "Jensen", "Moreau", "Costa", "Brown", "Ivanova", "Patel",
         "Schmidt", "Larsen", "Khan", "Fischer", "Romero", "Weber", "Ahmed", "Bianchi", "Meyer")
_CHAT = ("Are we still on for tomorrow?", "Thanks for yesterday!", "Can you call me back?",
         "I'll be there in 10 minutes.", "Did you see the game last night?", "Running a bit late.",
         "Happy birthday!", "Let's grab coffee this week.", "Sounds good to me.", "See you soon!",
         "Can you send me the photos?", "I left my keys at your place.", "What time works for you?",
         "The meeting moved to Thursday.", "Great news about the job!", "Don't forget the tickets.",
         "I'm at the station now.", "Dinner at 7?", "Just landed.", "Ok, talk later.")
_EVENTS = ("Dentist appointment", "Team meeting", "Yoga class", "Project review", "Car service",
           "Piano lesson", "Book club", "Parents evening", "Haircut", "Football practice",
           "Doctor visit", "Budget planning", "Lunch with Mia", "Gym session", "Flight to Lisbon",
           "Job interview", "Birthday party", "Movie night", "Language class", "Plumber visit",
           "Farmers market", "Quarterly report", "Coffee with Leo", "Vet appointment")
_PLACES = ("Main Street 12", "Office, room 4B", "City Gym", "Online", "Central Library", "Home",
           "Green Park", "Cafe Aroma", "Airport T2", "Town Hall")
_NOTES = (("Shopping list", "Milk, eggs, bread, tomatoes and rice"),
          ("Wifi password", "The guest network password is sunflower42"),
          ("Gift ideas", "A scarf for Mum and a puzzle book for Dad"),
          ("Packing list", "Passport, charger, sunscreen and two books"),
          ("Meeting notes", "Ship the new release on Friday after testing"),
          ("Recipe", "Pancakes need flour, milk, two eggs and a pinch of salt"),
          ("Books to read", "Dune, Middlemarch and The Hobbit"),
          ("Garden", "Water the basil every morning and repot the fern"),
          ("Car", "Next oil change at 95000 km"),
          ("Workout", "Three sets of squats, push-ups and planks"),
          ("Travel plans", "Train to Porto on the 14th, hotel near the river"),
          ("Quotes", "Simplicity is the ultimate sophistication"))
_FILES = {
    "Documents": ("report.pdf", "budget.xlsx", "resume.docx", "notes.txt", "contract.pdf", "invoice_march.pdf",
                  "letter.docx", "minutes.txt", "thesis_draft.pdf", "plan.odt"),
    "Downloads": ("setup.zip", "manual.pdf", "ticket.pdf", "map.png", "podcast.mp3", "slides.pptx",
                  "boarding_pass.pdf", "song.mp3", "dataset.csv", "photo_edit.jpg"),
    "Pictures": ("beach.jpg", "birthday.jpg", "cat.png", "sunset.jpg", "family.jpg", "receipt.png",
                 "mountains.jpg", "screenshot.png", "garden.jpg", "concert.jpg"),
    "Music": ("morning_run.mp3", "jazz_mix.mp3", "lullaby.mp3", "guitar_demo.wav", "road_trip.mp3",
              "piano_sonata.flac", "summer_hits.mp3", "rain_sounds.mp3", "choir.wav", "ballad.mp3"),
}
_EXPENSES = {
    "Groceries": ("Supermarket", "Bakery", "Farmers market", "Fruit stand", "Corner shop"),
    "Dining": ("Pizza place", "Sushi bar", "Cafe", "Burger joint", "Thai restaurant"),
    "Transport": ("Bus pass", "Taxi", "Train ticket", "Fuel", "Parking"),
    "Shopping": ("Shoes", "Books", "Headphones", "T-shirt", "Kitchen scale"),
    "Bills": ("Electricity", "Phone bill", "Internet", "Water", "Insurance"),
    "Entertainment": ("Cinema", "Concert", "Museum", "Streaming", "Bowling"),
}
_ALARM_LABELS = ("Wake up", "Gym", "Medicine", "School run", "Meeting", "Call Mum", "Take out bins", "Nap")
_TODOS = ("Buy milk", "Pay rent", "Call the bank", "Water the plants", "Book flights", "Renew passport",
          "Clean the garage", "Email the landlord", "Fix the bike", "Return library books",
          "Plan the party", "Send the invoice", "Order new glasses", "Walk the dog")


def money(cents: int) -> str:
    """``4250`` -> ``"$42.50"``."""
    return f"${cents // 100:,}.{cents % 100:02d}"


def pretty_date(iso: str) -> str:
    """``"2025-06-03"`` -> ``"Tue, Jun 3"``."""
    d = date.fromisoformat(iso)
    return f"{d:%a}, {d:%b} {d.day}"


def next_id(items: list[dict[str, Any]]) -> int:
    return max((int(i["id"]) for i in items), default=0) + 1


def empty_world() -> dict[str, Any]:
    """A world with no user data and default settings (the server's schema in one place).

    ``layout`` reorders lists of the screens (:data:`LAYOUT_LISTS`); empty, every list keeps its
    fixed order. ``labels`` shows names of targets under others (``{"Wi-Fi": "Dit"}``: the screens write
    the Wi-Fi toggle "Dit"; :func:`check_labels`); empty, every name is its own.
    """
    return {
        "today": TODAY.isoformat(),
        "contacts": [], "threads": [], "events": [], "notes": [], "files": [], "expenses": [],
        "alarms": [], "todos": [],
        "settings": {"wifi": True, "bluetooth": False, "airplane": False, "location": True, "dnd": False,
                     "dark_theme": False, "font_size": "Default", "screen_timeout": "1 minute",
                     "ringtone": "Chime", "vibrate": True, "device_name": "My Phone"},
        "log": [], "flash": None, "layout": {}, "labels": {},
    }


#: targets held out of training, by kind: with ``--targets seen`` no demonstration or training rollout has
#: one of them as its target (they still show on the screens), and evaluation with ``--targets unseen``
#: runs only episodes that target one, so that held-out success says whether the agent reaches targets
#: it never saw. One of each kind (two apps, a quarter of the files), chosen so that the held-out names
#: are spelled like the others (single and multi-token names on each side)
HELD_OUT_TARGETS: dict[str, frozenset[str]] = {
    "app": frozenset({"clock", "tasks"}),
    "toggle": frozenset({"location"}),
    "section": frozenset({"storage"}),
    "folder": frozenset({"Pictures"}),
    "file": frozenset({"budget.xlsx", "letter.docx", "thesis_draft.pdf", "manual.pdf", "slides.pptx",
                       "dataset.csv", "jazz_mix.mp3", "piano_sonata.flac", "choir.wav", "road_trip.mp3"}),
}


def held_out_names() -> frozenset[str]:
    """:data:`HELD_OUT_TARGETS` as goals and screens write them (``Clock``, ``Location``, ``Storage``...),
    the files of a held-out folder included (a file episode names its folder)."""
    names = {APP_TITLES[a] for a in HELD_OUT_TARGETS["app"]} | {SETTINGS_TOGGLES[k] for k in HELD_OUT_TARGETS["toggle"]}
    names |= {SETTINGS_SECTIONS[k] for k in HELD_OUT_TARGETS["section"]}
    names |= {f for folder in HELD_OUT_TARGETS["folder"] for f in _FILES[folder]}
    return frozenset(names | HELD_OUT_TARGETS["folder"] | HELD_OUT_TARGETS["file"])


#: the names the screens show for the targets a task's parameter holds by key: apps, toggles, sections
#: (folders and files are shown by their own names)
_SHOWN_NAMES: dict[str, dict[str, str]] = {"app": APP_TITLES, "toggle": SETTINGS_TOGGLES, "section": SETTINGS_SECTIONS}


def target_name(kind: str, value: Any) -> str:
    """The name the screens show for a target of ``kind`` (:data:`HELD_OUT_TARGETS`' kinds) that a task's
    parameter holds: an app's title, a toggle's or section's label, a folder's or file's own name."""
    table = _SHOWN_NAMES.get(kind)
    return table[str(value)] if table is not None else str(value)


@functools.lru_cache(maxsize=1)
def phone_names() -> frozenset[str]:
    """Every name of an app, toggle, section, folder and file the worlds draw from (a made-up name shown
    in place of a target must be none of them)."""
    return frozenset({*APP_TITLES.values(), *SETTINGS_TOGGLES.values(), *SETTINGS_SECTIONS.values(), *FOLDERS,
                      *(f for files in _FILES.values() for f in files)})


#: the most names a world's ``labels`` may rename, and the longest a shown name may be
MAX_LABELS, MAX_LABEL_CHARS = 8, 64


def check_labels(labels: Any) -> None:
    """Raise ``ValueError`` unless ``labels`` maps names of the phone (:func:`phone_names`) to other
    printable names, one line each, at most :data:`MAX_LABELS` of them."""
    if not isinstance(labels, dict):
        raise ValueError(f"labels must be an object, got {type(labels).__name__}")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"labels may rename at most {MAX_LABELS} names, got {len(labels)}")
    known = phone_names()
    for old, new in labels.items():
        if old not in known:
            raise ValueError(f"labels: {str(old)[:40]!r} is not a name of the phone's apps, settings, folders or files")
        if not isinstance(new, str) or not new.strip() or len(new) > MAX_LABEL_CHARS or not new.isprintable():
            raise ValueError(f"labels[{old!r}] must be a printable name of 1-{MAX_LABEL_CHARS} characters")


#: the lists a world's ``layout`` may reorder, by name, each in its fixed order: the launcher's icon
#: grid, the Settings screen's quick toggles and its sections, the Files app's folders, and the files listed in a
#: folder (every file name the worlds draw from, in the order a folder lists those it holds)
LAYOUT_LISTS: dict[str, tuple[str, ...]] = {
    "apps": APPS, "toggles": tuple(SETTINGS_TOGGLES), "sections": tuple(SETTINGS_SECTIONS), "folders": FOLDERS,
    "files": tuple(name for folder in FOLDERS for name in _FILES[folder]),
}


def shuffled_layout(rng: random.Random, lists: tuple[str, ...]) -> dict[str, list[str]]:
    """A ``layout`` that permutes each of ``lists`` (names of :data:`LAYOUT_LISTS`), drawn from ``rng``."""
    return {name: rng.sample(list(LAYOUT_LISTS[name]), len(LAYOUT_LISTS[name])) for name in lists}


def check_layout(layout: Any) -> None:
    """Raise ``ValueError`` unless ``layout`` maps names of :data:`LAYOUT_LISTS` to permutations of them."""
    if not isinstance(layout, dict):
        raise ValueError(f"layout must be an object, got {type(layout).__name__}")
    for name, order in layout.items():
        if name not in LAYOUT_LISTS:
            raise ValueError(f"unknown layout list {name!r}; known: {sorted(LAYOUT_LISTS)}")
        if not isinstance(order, list) or sorted(map(str, order)) != sorted(LAYOUT_LISTS[name]) \
                or not all(isinstance(v, str) for v in order):
            raise ValueError(f"layout[{name!r}] must list each of {list(LAYOUT_LISTS[name])} once")


def _phone(rng: random.Random) -> str:
    return f"(555) {rng.randint(200, 989)}-{rng.randint(1000, 9999)}"


def copy_json(value: Any, *, sort_keys: bool = False) -> Any:
    """What ``json.loads(json.dumps(value, sort_keys=sort_keys))`` gives, without the text in between:
    dicts and lists are new (tuples become lists), strings, numbers, booleans and ``None`` are shared
    (immutable). A dict key that is not a string, or a value JSON does not hold, goes through
    :mod:`json` itself (the same result, or its error). ~4x faster than :func:`copy.deepcopy` on a
    world, which matters at a state read every step."""
    try:
        return _copy_json(value, sort_keys)
    except _NotPlain:
        return json.loads(json.dumps(value, sort_keys=sort_keys))


class _NotPlain(Exception):
    pass


_SCALARS = (str, int, float, bool, type(None))


def _copy_json(v: Any, sort_keys: bool) -> Any:
    t = type(v)
    if t is dict:
        keys = sorted(v) if sort_keys else v
        out = {}
        for k in keys:
            if type(k) is not str:
                raise _NotPlain
            out[k] = _copy_json(v[k], sort_keys)
        return out
    if t is list or t is tuple:
        return [_copy_json(x, sort_keys) for x in v]
    if t in _SCALARS:
        return v
    raise _NotPlain


def make_world(seed: int) -> dict[str, Any]:
    """The app data of a seed: same seed, same world (a new copy each call). Names and titles are
    unique per list."""
    return copy_json(_built_world(int(seed)))


@functools.lru_cache(maxsize=64)
def _built_world(seed: int) -> dict[str, Any]:
    """The world of ``seed``, built once (~0.6 ms) and kept for :func:`make_world`'s copies (never
    handed out itself). 64 seeds (~42 KB each): an episode's start reads its seed's world two or
    three times (its parameters, its start state, its group's other starts) within one batch."""
    rng = random.Random(seed)
    w = empty_world()
    firsts = rng.sample(_FIRST, CONTACT_COUNT)
    lasts = [rng.choice(_LAST) for _ in firsts]
    names = sorted(f"{f} {l}" for f, l in zip(firsts, lasts))
    w["contacts"] = [{"id": i + 1, "name": n, "phone": _phone(rng),
                      "email": f"{n.split()[0].lower()}.{n.split()[1].lower()}@mail.com",
                      "starred": rng.random() < 0.25} for i, n in enumerate(names)]
    chatters = rng.sample(names, 8)
    threads = []
    for i, n in enumerate(chatters):
        msgs = []
        hour = rng.randint(7, 20)
        for k in range(rng.randint(2, 5)):
            msgs.append({"from_me": bool(k % 2) if rng.random() < 0.8 else rng.random() < 0.5,
                         "text": rng.choice(_CHAT), "time": f"{hour:02d}:{rng.randint(0, 59):02d}"})
        msgs[-1]["from_me"] = False  # every thread ends with the contact's words
        threads.append({"id": i + 1, "contact": n, "messages": msgs})
    w["threads"] = threads
    days = [TODAY + timedelta(days=d) for d in range(14)]
    w["events"] = sorted(
        ({"title": t, "date": rng.choice(days).isoformat(),
          "time": f"{rng.randint(7, 20):02d}:{rng.choice((0, 15, 30, 45)):02d}", "location": rng.choice(_PLACES)}
         for t in rng.sample(_EVENTS, 16)), key=lambda e: (e["date"], e["time"]))
    for i, e in enumerate(w["events"]):
        e["id"] = i + 1
    w["notes"] = [{"id": i + 1, "title": t, "body": b} for i, (t, b) in enumerate(rng.sample(_NOTES, 8))]
    files = []
    for folder in FOLDERS:
        for name in sorted(rng.sample(_FILES[folder], rng.randint(5, 9))):
            files.append({"id": len(files) + 1, "name": name, "folder": folder,
                          "size_kb": rng.randint(12, 9000), "modified": (TODAY - timedelta(days=rng.randint(0, 90))).isoformat()})
    w["files"] = files
    expenses = []
    for _ in range(22):
        cat = rng.choice(CATEGORIES)
        expenses.append({"title": rng.choice(_EXPENSES[cat]), "category": cat,
                         "amount_cents": rng.randint(150, 15000),
                         "date": (TODAY - timedelta(days=rng.randint(1, 30))).isoformat()})
    expenses.sort(key=lambda e: e["date"], reverse=True)
    w["expenses"] = [dict(e, id=i + 1) for i, e in enumerate(expenses)]
    times = sorted(rng.sample([f"{h:02d}:{m:02d}" for h in range(5, 23) for m in (0, 15, 30, 45)], 5))
    w["alarms"] = [{"id": i + 1, "time": t, "label": rng.choice(_ALARM_LABELS), "enabled": rng.random() < 0.5}
                   for i, t in enumerate(times)]
    w["todos"] = [{"id": i + 1, "title": t, "done": rng.random() < 0.3} for i, t in enumerate(rng.sample(_TODOS, 8))]
    s = w["settings"]
    for key in SETTINGS_TOGGLES:
        s[key] = rng.random() < 0.5
    s.update(dark_theme=rng.random() < 0.3, font_size=rng.choice(FONT_SIZES),
             screen_timeout=rng.choice(SCREEN_TIMEOUTS), ringtone=rng.choice(RINGTONES),
             device_name=rng.choice(("My Phone", "Pixel", "Galaxy", "Work phone")))
    return w
