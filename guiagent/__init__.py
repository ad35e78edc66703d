"""guiagent: train GUI and device-control agents with reinforcement learning.

The core package: typed data (:mod:`guiagent.types`), configs, the CLI, the
trajectory store and the policy backends. It imports no other guiagent package
except through the CLI.
"""

__version__ = "0.1.0"
__guiagent__ = True

# rl, judge, webui, emulators, grounding are top-level packages too: fail here, with the
# clashing path, if another package of one of those names would be imported in their place
from guiagent._packages import check_packages as _check_packages  # noqa: E402

_check_packages()
