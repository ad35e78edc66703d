"""The easy tasks with their targets moved: each episode reorders the list its target sits in.

``open_app_shuffled`` shuffles the launcher's icon grid, ``settings_turn_on_shuffled`` /
``settings_turn_off_shuffled`` / ``settings_open_section_shuffled`` the Settings screen's toggles
and sections, ``files_open_folder_shuffled`` the Files app's folders, ``files_open_file_shuffled`` the folders
and the files a folder lists. The order is drawn from the
episode's seed and kept in its parameters (``params["layout"]``, see ``world.LAYOUT_LISTS``); goals,
oracles, milestones and success are those of the fixed-layout task. A policy that solves these has
learnt to find the element the goal names wherever the screen puts it, not a map from goal words to
screen places (docs/webapps.md, "Shuffled layouts").
"""

from __future__ import annotations

from dataclasses import replace

from .base import WebTask, task_class
from .easy import FilesOpenFile, FilesOpenFolder, OpenApp, SettingsOpenSection, SettingsTurnOff, SettingsTurnOn


def shuffled(cls: type[WebTask], lists: tuple[str, ...]) -> type[WebTask]:
    """``cls``'s row as ``<task_id>_shuffled``, its episodes reordering ``lists`` of the screens."""
    family = replace(cls.family, task_id=cls.task_id + "_shuffled", shuffle=lists,
                     doc=f"``{cls.task_id}`` with {', '.join(lists)} in an order drawn from each episode's seed.")
    return task_class(family, __name__)


TASKS = [
    shuffled(OpenApp, ("apps",)),
    shuffled(SettingsTurnOn, ("toggles", "sections")),
    shuffled(SettingsTurnOff, ("toggles", "sections")),
    shuffled(SettingsOpenSection, ("toggles", "sections")),
    shuffled(FilesOpenFolder, ("folders",)),
    shuffled(FilesOpenFile, ("folders", "files")),
]
