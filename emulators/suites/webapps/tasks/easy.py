"""Easy tasks whose targets sit at fixed places on the screen for every seed.

Launcher icons lie in a fixed grid, settings toggles and sections in fixed rows,
tabs and the floating action button at fixed spots, the up arrow top left: only
the goal text changes with the seed, so even a tiny model trained from scratch
can learn them (docs/training.md, "Learning from scratch on CPU").
"""

from __future__ import annotations

from typing import Any

from guiagent.types import Action, Finish

from ..world import (APP_TITLES, APPS, CLOCK_TABS, FOLDERS, FONT_SIZES, SETTINGS_SECTIONS,
                     SETTINGS_TOGGLES)
from .base import WebTask, app_step, split_rel, last_view, visited


def _last_is(state: dict[str, Any], target: str) -> bool:
    """Whether the page showing now (the last one viewed) is ``target`` (query keys must match)."""
    last = last_view(state)
    if last is None:
        return False
    path, query = split_rel(last)
    want_path, want_query = split_rel(target)
    return path == want_path and all(query.get(k) == v for k, v in want_query.items())


class _ReachPage(WebTask):
    """Done once a given page shows: success reads the page now showing; the oracle walks there, then finishes."""

    def target(self) -> str:
        """The page (path and query) that completes the task."""
        raise NotImplementedError

    def route(self):
        """The taps from the launcher to :meth:`target`."""
        raise NotImplementedError

    def success(self, state, answer):
        return _last_is(state, self.target())

    def progress(self, state):
        return [visited(state, self.target())]

    def oracle(self, device) -> Action | None:
        if self.at(device, self.target()):
            return Finish()
        return self.navigate(device, self.route())


class OpenApp(_ReachPage):
    task_id = "open_app"
    template = "Open the {title} app."
    difficulty = "easy"
    max_steps = 3

    @classmethod
    def choose(cls, world, rng):
        app = rng.choice(APPS)
        return {"app": app, "title": APP_TITLES[app]}

    def target(self) -> str:
        return self.params["app"]

    def route(self):
        return self.route_to(app_step(self.params["app"]))


class GoHome(WebTask):
    task_id = "go_home"
    template = "Go back to the home screen."
    difficulty = "easy"
    max_steps = 3

    @classmethod
    def choose(cls, world, rng):
        return {"app": rng.choice(APPS)}

    def start_page(self):
        return self.params["app"]

    def success(self, state, answer):
        return _last_is(state, "")

    def progress(self, state):
        return ["" in state["log"]]  # the episode starts in the app: any launcher view is the way home

    def oracle(self, device):
        if self.at(device, ""):
            return Finish()
        return self.click(device, "a.up")


class _SettingsToggle(WebTask):
    start = "settings"
    difficulty = "easy"
    max_steps = 3
    value = True

    @classmethod
    def choose(cls, world, rng):
        key = rng.choice(list(SETTINGS_TOGGLES))
        return {"key": key, "label": SETTINGS_TOGGLES[key]}

    def prepare(self, world):
        world["settings"][self.params["key"]] = not self.value

    def success(self, state, answer):
        return state["settings"][self.params["key"]] is self.value

    def progress(self, state):
        return [self.success(state, None)]

    def oracle(self, device):
        if self.success(self.state(), None):
            return Finish()
        if not self.at(device, "settings"):
            return self.navigate(device, self.route_to(app_step("settings")))
        return self.click(device, f'button.switch[data-key="{self.params["key"]}"]')


class SettingsTurnOn(_SettingsToggle):
    task_id = "settings_turn_on"
    template = "Turn on {label}."
    value = True


class SettingsTurnOff(_SettingsToggle):
    task_id = "settings_turn_off"
    template = "Turn off {label}."
    value = False


class SettingsOpenSection(_ReachPage):
    task_id = "settings_open_section"
    template = "Open the {label} settings."
    difficulty = "easy"
    start = "settings"
    max_steps = 3

    @classmethod
    def choose(cls, world, rng):
        slug = rng.choice(list(SETTINGS_SECTIONS))
        return {"section": slug, "label": SETTINGS_SECTIONS[slug]}

    def target(self) -> str:
        return f"settings/{self.params['section']}"

    def route(self):
        return self.route_to(app_step("settings"), (self.target(), f'a[data-section="{self.params["section"]}"]'))


class SettingsFontSize(WebTask):
    task_id = "settings_font_size"
    template = "Set the font size to {size}."
    difficulty = "easy"
    start = "settings"
    max_steps = 5

    @classmethod
    def choose(cls, world, rng):
        return {"size": rng.choice([f for f in FONT_SIZES if f != world["settings"]["font_size"]])}

    def success(self, state, answer):
        return state["settings"]["font_size"] == self.params["size"]

    def progress(self, state):
        return [visited(state, "settings/display"), self.success(state, None)]

    def oracle(self, device):
        if self.success(self.state(), None):
            return Finish()
        route = self.route_to(app_step("settings"), ("settings/display", 'a[data-section="display"]'))
        return (self.navigate(device, route)
                or self.click(device, f'button[role="radio"][data-value="{self.params["size"]}"]'))


class SettingsDarkTheme(WebTask):
    task_id = "settings_dark_theme"
    template = "Turn {state} the dark theme."
    difficulty = "easy"
    start = "settings"
    max_steps = 5

    @classmethod
    def choose(cls, world, rng):
        return {"state": rng.choice(("on", "off"))}

    def prepare(self, world):
        world["settings"]["dark_theme"] = self.params["state"] != "on"

    def success(self, state, answer):
        return state["settings"]["dark_theme"] is (self.params["state"] == "on")

    def progress(self, state):
        return [visited(state, "settings/display"), self.success(state, None)]

    def oracle(self, device):
        if self.success(self.state(), None):
            return Finish()
        route = self.route_to(app_step("settings"), ("settings/display", 'a[data-section="display"]'))
        return self.navigate(device, route) or self.click(device, 'button.switch[data-key="dark_theme"]')


class FilesOpenFolder(_ReachPage):
    task_id = "files_open_folder"
    template = "Open the {folder} folder."
    difficulty = "easy"
    start = "files"
    max_steps = 3

    @classmethod
    def choose(cls, world, rng):
        return {"folder": rng.choice(FOLDERS)}

    def target(self) -> str:
        return f"files/{self.params['folder']}"

    def route(self):
        return self.route_to(app_step("files"), (self.target(), f'a[data-folder="{self.params["folder"]}"]'))


#: (app, tab key, tab label) of the tabs that are not an app's first tab
_TABS = [("contacts", "fav", "Favourites"), ("expenses", "summary", "Summary"),
         *(("clock", k, v) for k, v in CLOCK_TABS.items() if k != "alarm")]


class OpenTab(_ReachPage):
    task_id = "open_tab"
    template = "Open the {tab_label} tab in the {title} app."
    difficulty = "easy"
    max_steps = 4

    @classmethod
    def choose(cls, world, rng):
        app, tab, label = rng.choice(_TABS)
        return {"app": app, "title": APP_TITLES[app], "tab": tab, "tab_label": label}

    def target(self) -> str:
        return f"{self.params['app']}?tab={self.params['tab']}"

    def progress(self, state):
        return [visited(state, self.params["app"]), visited(state, self.target())]

    def route(self):
        return self.route_to(app_step(self.params["app"]), (self.target(), f'a.tab[data-tab="{self.params["tab"]}"]'))


#: thing -> (app, form path) of every screen reached with an app's floating action button
_NEW_FORMS = {"contact": ("contacts", "contacts/new"), "event": ("calendar", "calendar/new"),
              "note": ("notes", "notes/new"), "expense": ("expenses", "expenses/new"),
              "alarm": ("clock", "clock/alarms/new"), "message": ("messages", "messages/new")}


class OpenNewForm(_ReachPage):
    task_id = "open_new_form"
    template = "Open the screen for creating a new {thing}."
    difficulty = "easy"
    max_steps = 4

    @classmethod
    def choose(cls, world, rng):
        return {"thing": rng.choice(sorted(_NEW_FORMS))}

    def target(self) -> str:
        return _NEW_FORMS[self.params["thing"]][1]

    def progress(self, state):
        app, form = _NEW_FORMS[self.params["thing"]]
        return [visited(state, app), visited(state, form)]

    def route(self):
        app, form = _NEW_FORMS[self.params["thing"]]
        return self.route_to(app_step(app), (form, "#fab"))


TASKS = [OpenApp, GoHome, SettingsTurnOn, SettingsTurnOff, SettingsOpenSection, SettingsFontSize,
         SettingsDarkTheme, FilesOpenFolder, OpenTab, OpenNewForm]
