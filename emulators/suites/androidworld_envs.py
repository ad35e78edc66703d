"""Importing this module registers every AndroidWorld task with Gymnasium (needs ``android_world``).

Kept apart from ``import emulators`` so that importing the package never needs
android_world: ``gymnasium.make("emulators.suites.androidworld_envs:guiagent/androidworld.<Task>")``
imports it (Gymnasium's ``module:id`` form) and so registers the ids on first use.
"""

from __future__ import annotations

from emulators.suites.registration import register_envs

ENV_IDS: list[str] = register_envs(("androidworld",))
