"""Easy tasks whose targets sit at fixed places on the screen for every seed.

Launcher icons lie in a fixed grid, settings toggles and sections in fixed rows,
tabs and the floating action button at fixed spots, the up arrow top left: only
the goal text changes with the seed, so even a tiny model trained from scratch
can learn them (docs/training.md, "Learning from scratch on CPU").
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from guiagent.types import Finish

from ..world import (APP_TITLES, APPS, CLOCK_TABS, FOLDERS, FONT_SIZES, SETTINGS_SECTIONS,
                     SETTINGS_TOGGLES)
from .base import (FINISH, Family, Milestone, Params, Route, State, WebTask, app_step, change, click, done, last_is,
                   tasks_of, walk)

#: (app, tab key, tab label) of the tabs that are not an app's first tab
_TABS = [("contacts", "fav", "Favourites"), ("expenses", "summary", "Summary"),
         *(("clock", k, v) for k, v in CLOCK_TABS.items() if k != "alarm")]

#: thing -> (app, form path) of every screen reached with an app's floating action button
_NEW_FORMS = {"contact": ("contacts", "contacts/new"), "event": ("calendar", "calendar/new"),
              "note": ("notes", "notes/new"), "expense": ("expenses", "expenses/new"),
              "alarm": ("clock", "clock/alarms/new"), "message": ("messages", "messages/new")}


def _reach(task_id: str, template: str, max_steps: int, choose: Callable[[State, random.Random], dict[str, Any]],
           route: Route | Callable[[Params], Route],
           milestones: Sequence[Milestone] | Callable[[Params], Sequence[Milestone]] | None = None,
           start: str = "", targets: dict[str, str] | None = None) -> Family:
    """A task done once the route's last page shows: success reads the page now showing; the oracle
    walks there, then finishes. Milestone: that page viewed (unless ``milestones`` says otherwise)."""
    if milestones is None:
        if callable(route):
            raise TypeError(f"{task_id}: a route computed from the parameters needs its milestones")
        milestones = (route[-1][0],)
    return Family(task_id, template, "easy", max_steps, choose=choose, start=start, route=route, oracle=walk(FINISH),
                  success=lambda t, s, a: last_is(s, t.route()[-1][0]), milestones=milestones, targets=targets or {})


def _toggle(task_id: str, template: str, value: bool) -> Family:
    """Turn a settings switch on (``value``) or off; the switch starts the other way."""
    def prepare(p: Params, world: State) -> None:
        world["settings"][p["key"]] = not value

    return Family(task_id, template, "easy", 3, start="settings", choose=_pick_toggle, prepare=prepare,
                  targets={"key": "toggle"},
                  success=lambda t, s, a: s["settings"][t.params["key"]] is value, milestones=(done,),
                  route=(app_step("settings"),), oracle=change(click('button.switch[data-key="{key}"]')))


def _pick_app(world: State, rng: random.Random) -> dict[str, Any]:
    app = rng.choice(APPS)
    return {"app": app, "title": APP_TITLES[app]}


def _pick_toggle(world: State, rng: random.Random) -> dict[str, Any]:
    key = rng.choice(list(SETTINGS_TOGGLES))
    return {"key": key, "label": SETTINGS_TOGGLES[key]}


def _pick_section(world: State, rng: random.Random) -> dict[str, Any]:
    slug = rng.choice(list(SETTINGS_SECTIONS))
    return {"section": slug, "label": SETTINGS_SECTIONS[slug]}


def _pick_tab(world: State, rng: random.Random) -> dict[str, Any]:
    app, tab, label = rng.choice(_TABS)
    return {"app": app, "title": APP_TITLES[app], "tab": tab, "tab_label": label}


def _set_dark_theme(p: Params, world: State) -> None:
    world["settings"]["dark_theme"] = p["state"] != "on"


def _launcher_seen(t: WebTask, state: State) -> bool:
    """The episode starts in the app: any launcher view is the way home."""
    return "" in state["log"]


def _new_form(p: Params) -> Sequence[tuple[str, str | None]]:
    app, form = _NEW_FORMS[p["thing"]]
    return app_step(app), (form, "#fab")


def _new_form_milestones(p: Params) -> Sequence[Milestone]:
    return _NEW_FORMS[p["thing"]]  # the app, then its form


_DISPLAY = (app_step("settings"), ("settings/display", 'a[data-section="display"]'))
#: from the launcher to a file's page (the episode starts in the Files app, one hop along)
_FILE_IN_FOLDER = (app_step("files"), ("files/{folder}", 'a[data-folder="{folder}"]'),
                   ("files/{folder}/{fid}", 'a.row[data-id="{fid}"]'))


def _pick_file_in_folder(world: State, rng: random.Random) -> dict[str, Any]:
    f = rng.choice(world["files"])
    return {"folder": f["folder"], "name": f["name"], "fid": f["id"]}

FAMILIES = (
    _reach("open_app", "Open the {title} app.", 3, choose=_pick_app, route=(app_step("{app}"),), targets={"app": "app"}),
    Family("go_home", "Go back to the home screen.", "easy", 3, choose=lambda world, rng: {"app": rng.choice(APPS)},
           start="{app}", success=lambda t, s, a: last_is(s, ""), milestones=(_launcher_seen,),
           oracle=lambda t, device: Finish() if t.at(device, "") else t.click(device, "a.up")),
    _toggle("settings_turn_on", "Turn on {label}.", True),
    _toggle("settings_turn_off", "Turn off {label}.", False),
    _reach("settings_open_section", "Open the {label} settings.", 3, start="settings", choose=_pick_section,
           route=(app_step("settings"), ("settings/{section}", 'a[data-section="{section}"]')),
           targets={"section": "section"}),
    Family("settings_font_size", "Set the font size to {size}.", "easy", 5, start="settings",
           choose=lambda world, rng: {"size": rng.choice([f for f in FONT_SIZES
                                                          if f != world["settings"]["font_size"]])},
           success=lambda t, s, a: s["settings"]["font_size"] == t.params["size"],
           milestones=("settings/display", done), route=_DISPLAY,
           oracle=change(click('button[role="radio"][data-value="{size}"]'))),
    Family("settings_dark_theme", "Turn {state} the dark theme.", "easy", 5, start="settings",
           choose=lambda world, rng: {"state": rng.choice(("on", "off"))}, prepare=_set_dark_theme,
           success=lambda t, s, a: s["settings"]["dark_theme"] is (t.params["state"] == "on"),
           milestones=("settings/display", done), route=_DISPLAY,
           oracle=change(click('button.switch[data-key="dark_theme"]'))),
    _reach("files_open_folder", "Open the {folder} folder.", 3, start="files",
           choose=lambda world, rng: {"folder": rng.choice(FOLDERS)},
           route=(app_step("files"), ("files/{folder}", 'a[data-folder="{folder}"]')), targets={"folder": "folder"}),
    # three steps on two screens, each tap naming a target of the goal: the folder, the file in it, then finish
    Family("files_open_file", "Open the file {name} in the {folder} folder.", "medium", 5, start="files",
           choose=_pick_file_in_folder, route=_FILE_IN_FOLDER, oracle=walk(FINISH),
           success=lambda t, s, a: last_is(s, t.route()[-1][0]), milestones=("files/{folder}", "files/{folder}/{fid}"),
           targets={"folder": "folder", "name": "file"}),
    _reach("open_tab", "Open the {tab_label} tab in the {title} app.", 4, choose=_pick_tab,
           route=(app_step("{app}"), ("{app}?tab={tab}", 'a.tab[data-tab="{tab}"]')),
           milestones=("{app}", "{app}?tab={tab}")),
    _reach("open_new_form", "Open the screen for creating a new {thing}.", 4,
           choose=lambda world, rng: {"thing": rng.choice(sorted(_NEW_FORMS))}, route=_new_form,
           milestones=_new_form_milestones),
)

TASKS = tasks_of(FAMILIES, __name__)
(OpenApp, GoHome, SettingsTurnOn, SettingsTurnOff, SettingsOpenSection, SettingsFontSize, SettingsDarkTheme,
 FilesOpenFolder, FilesOpenFile, OpenTab, OpenNewForm) = TASKS
