"""Where actions touch a screen: devices, tasks, environments, suites, the fleet.

Importing the package registers the ``webapps`` and ``miniwob`` tasks with Gymnasium
(``gymnasium.make("guiagent/webapps.open_app")``); see docs/gymnasium.md.
"""

from emulators.base import ActionError, Device, DeviceError, GuiEnv, StepInfo, Task, check_env
from emulators.suites.registration import register_envs

__guiagent__ = True

__all__ = ["ActionError", "Device", "DeviceError", "GuiEnv", "StepInfo", "Task", "check_env"]


def _register() -> None:
    register_envs(skip_unavailable=True)


_register()
