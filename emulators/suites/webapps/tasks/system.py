"""Settings (beyond the fixed toggles) and Files tasks: bottom sheets, dialogs, renames, lookups."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from guiagent.types import Action

from ..world import FOLDERS, RINGTONES, SCREEN_TIMEOUTS
from .base import (Family, Move, State, WebTask, answer, app_step, change, done, fmt, norm, parse_count, tasks_of,
                   walk)

if TYPE_CHECKING:
    from emulators.browser import BrowserDevice

DEVICE_NAMES = ("Kitchen tablet", "Travel phone", "Blue phone", "Backup phone", "Studio phone")
NEW_FILE_NAMES = ("final.pdf", "old_version.txt", "keep.docx", "backup.zip", "summer.jpg", "demo.mp3")


def size_text(kb: int) -> str:
    """How the apps print a size (``240 KB``, ``2.3 MB``)."""
    return f"{kb / 1024:.1f} MB" if kb >= 1024 else f"{kb} KB"


def _sheet(task_id: str, template: str, key: str, section: str, opener: str, choices: tuple[str, ...]) -> Family:
    """Pick a value in a bottom sheet (opened by ``#opener``) of a settings section."""
    def choose(world: State, rng: random.Random) -> dict[str, Any]:
        return {"value": rng.choice([c for c in choices if c != world["settings"][key]])}

    def pick_value(t: WebTask, device: BrowserDevice) -> Action | None:
        sheet = f"{opener}-sheet"
        if t.page_info(device)["dialog"] != sheet:
            return t.click(device, f"#{opener}")
        return t.click(device, f'#{sheet} button[data-value="{t.params["value"]}"]')

    return Family(task_id, template, "medium", 8, start="settings", choose=choose,
                  success=lambda t, s, a: s["settings"][key] == t.params["value"],
                  milestones=(f"settings/{section}", done),
                  route=(app_step("settings"), (f"settings/{section}", f'a[data-section="{section}"]')),
                  oracle=change(pick_value))


def _rename_device(t: WebTask, device: BrowserDevice) -> Action | None:
    if t.page_info(device)["dialog"] != "name-dialog":
        return t.click(device, "#device-name")
    return t.form(device, [('#name-dialog input[name="value"]', t.params["name"])], "#name-dialog button.confirm")


def _pick_file(world: State, rng: random.Random) -> dict[str, Any]:
    f = rng.choice(world["files"])
    return {"fid": f["id"], "name": f["name"], "folder": f["folder"], "size": size_text(f["size_kb"])}


#: from the launcher to the file's page
_FILE = (app_step("files"), ("files/{folder}", 'a[data-folder="{folder}"]'),
         ("files/{folder}/{fid}", 'a.row[data-id="{fid}"]'))


def _file_deleted(t: WebTask, state: State, answer: str | None) -> bool:
    return all(f["id"] != t.params["fid"] for f in state["files"]) and \
        len(state["files"]) == len(t.initial_state()["files"]) - 1


def _file_sheet(item: str, dialog: str, fields: dict[str, str] | None = None) -> Move:
    """Move on the file's page: More, ``item`` in the file's sheet, then in the ``dialog`` that
    opens the ``fields`` (selector: value template) and its confirm button."""
    def move(t: WebTask, device: BrowserDevice) -> Action | None:
        shown = t.page_info(device)["dialog"]
        if shown == dialog:
            values = [(sel, fmt(v, t.params)) for sel, v in (fields or {}).items()]
            return t.form(device, values, f"#{dialog} button.confirm")
        return t.click(device, f"#file-sheet #{item}" if shown == "file-sheet" else "#more")
    return move


def _pick_file_rename(world: State, rng: random.Random) -> dict[str, Any]:
    p = _pick_file(world, rng)
    taken = {f["name"] for f in world["files"] if f["folder"] == p["folder"]}
    return {**p, "new_name": rng.choice([n for n in NEW_FILE_NAMES if n not in taken])}


def _pick_folder(world: State, rng: random.Random) -> dict[str, Any]:
    folder = rng.choice(FOLDERS)
    return {"folder": folder, "count": sum(f["folder"] == folder for f in world["files"])}


FAMILIES = (
    _sheet("settings_ringtone", "Change the phone ringtone to {value}.", "ringtone", "sound", "ringtone", RINGTONES),
    _sheet("settings_screen_timeout", "Set the screen timeout to {value}.", "screen_timeout", "display", "timeout",
           SCREEN_TIMEOUTS),
    Family("settings_device_name", 'Rename this phone to "{name}".', "medium", 10, start="settings",
           choose=lambda world, rng: {"name": rng.choice(DEVICE_NAMES)},
           success=lambda t, s, a: norm(s["settings"]["device_name"]) == norm(t.params["name"]),
           milestones=("settings/about", done),
           route=(app_step("settings"), ("settings/about", 'a[data-section="about"]')),
           oracle=change(_rename_device)),
    Family("files_delete", "Delete the file {name} from the {folder} folder.", "medium", 12, choose=_pick_file,
           success=_file_deleted, milestones=("files/{folder}", "files/{folder}/{fid}", done), route=_FILE,
           oracle=change(_file_sheet("delete", "confirm-delete"))),
    Family("files_rename", "In the {folder} folder, rename {name} to {new_name}.", "hard", 14,
           choose=_pick_file_rename,
           success=lambda t, s, a: any(f["id"] == t.params["fid"] and f["name"] == t.params["new_name"]
                                       for f in s["files"]),
           milestones=("files/{folder}", "files/{folder}/{fid}", done), route=_FILE,
           oracle=change(_file_sheet("rename", "rename-dialog",
                                     {'#rename-dialog input[name="name"]': "{new_name}"}))),
    Family("files_size_lookup", "How big is the file {name} in the {folder} folder?", "medium", 8, choose=_pick_file,
           success=lambda t, s, a: norm(a).replace(" ", "") == norm(t.params["size"]).replace(" ", ""),
           milestones=("files", "files/{folder}/{fid}"), route=_FILE, oracle=walk(answer("{size}"))),
    Family("files_count", "How many files are in the {folder} folder?", "easy", 6, choose=_pick_folder,
           success=lambda t, s, a: parse_count(a) == t.params["count"], milestones=("files",),
           route=(app_step("files"),), oracle=walk(answer("{count}"))),
)

TASKS = tasks_of(FAMILIES, __name__)
(SettingsRingtone, SettingsScreenTimeout, SettingsDeviceName, FilesDelete, FilesRename, FilesSizeLookup,
 FilesCount) = TASKS
