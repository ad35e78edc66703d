"""MiniWoB++ pages as :class:`~emulators.base.Task` classes.

The pages ship inside the ``miniwob`` PyPI package (``miniwob/html/miniwob/*.html``)
and load from ``file://``. Each episode:

1. loads the page afresh (jQuery UI leaves a hidden ``.ui-helper-hidden-accessible``
   element whose text would otherwise carry over between episodes);
2. lifts the page's 10 s episode timer (``core.EPISODE_MAX_TIME``) to about 11 days
   and silences the on-page countdown: the environment's step budget bounds an
   episode instead, so a slow agent (a model on a CPU) is not cut off by wall time;
   jQuery animations (an accordion opening) jump to their end (``jQuery.fx.off``), so
   the screen after an action is the one it led to, not a frame from the middle;
3. seeds the page's random generator with ``Math.seedrandom(seed)`` and starts the
   episode with ``core.startEpisodeReal()``, then waits for ``WOB_TASK_READY``;
4. returns ``core.getUtterance()`` as the goal.

Snapshots (``GuiEnv.snapshot``) replay: see :attr:`MiniWobTask.snapshot_mode`.

Reward: the page's *raw* reward ``WOB_RAW_REWARD_GLOBAL`` in [-1, 1] (the
time-scaled ``WOB_REWARD_GLOBAL`` depends on wall time, so it is not
reproducible). Success is 1 iff the raw reward is positive, else 0 (partial
credit, as in ``click-checkboxes-soft``, counts as success when positive). The task is done when ``WOB_DONE_GLOBAL``.
"""

from __future__ import annotations

import importlib.util
import random
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from emulators.base import Device, DeviceError, Task
from emulators.suites.miniwob.oracles import MAX_STEPS, ORACLES, next_action
from guiagent.types import Action

__all__ = ["html_dir", "page_names", "MiniWobTask", "make_task_class", "TASK_CLASSES", "MOVES_WITH_TIME",
           "NONDETERMINISTIC"]


@lru_cache(maxsize=1)
def html_dir() -> Path:
    """``.../site-packages/miniwob/html`` (raises with install advice if missing)."""
    # found, not imported: the package imports gymnasium's env registry (~0.3 s), and only
    # its page files are needed
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the miniwob suite needs the `miniwob` package: pip install miniwob")
    path = Path(list(spec.submodule_search_locations)[0]) / "html"
    if not (path / "miniwob").is_dir():
        raise RuntimeError(f"miniwob is installed but has no task pages under {path}/miniwob")
    return path


@lru_cache(maxsize=1)
def page_names() -> tuple[str, ...]:
    """Every task page name, sorted (``click-button``, ``enter-text``...)."""
    return tuple(sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html")))


# Episode timer: setTimeout accepts at most 2**31-1 ms; 1e9 ms is ~11.6 days.
# jQuery animations (an accordion opening, a dialog showing) jump to their end: the settle after an
# action cannot see jQuery's animation loop, so without this the screen (and the element list) an agent
# got could be one from the middle of the animation, the elements not yet where a tap would find them.
# The reward display sits right of the task area; hidden, it can neither be scrolled into
# sight (jQuery UI dialogs scroll the page sideways when they take focus) nor show in the tree.
_START_JS = """(seed) => {
    core.EPISODE_MAX_TIME = 1e9;
    core.countdownTimer = function () {};
    const display = document.getElementById('reward-display');
    if (display) display.style.display = 'none';
    if (window.jQuery) jQuery.fx.off = true;
    Math.seedrandom(seed);
    core.startEpisodeReal();
    window.scrollTo(0, 0);
    return true;
}"""

#: pages whose screen moves on its own (a target that runs, prices that tick): no snapshots. Pages
#: with jQuery animations (``click-collapsible``, ``email-inbox``, ``drag-cube``) snapshot; their
#: animations jump to their end (``jQuery.fx.off``, set at each reset), so no state is taken mid-way.
#: Measured: ``python bench/snapshot.py --miniwob-survey`` (docs/gymnasium.md)
MOVES_WITH_TIME: frozenset[str] = frozenset({"chase-circle", "moving-items", "stock-market"})

#: pages whose screen is not the same twice for one seed and the same actions, registered with Gymnasium
#: as ``nondeterministic`` (its ``check_env`` then skips the determinism checks): those that move with
#: time; the jQuery UI dialog pages, whose dialog rasterises a few pixels one value apart from one
#: render to the next (resets of one seed included); ``click-pie``, whose wheel animates for 1.5 s at
#: the start and after each click, as long as the device waits for a page to settle, so a busy machine
#: captures it part way (``click-pie-nodelay`` does not animate). Found by ``check_env`` on every page.
NONDETERMINISTIC: frozenset[str] = MOVES_WITH_TIME | {"click-dialog", "click-dialog-2", "click-pie"}

_STATE_JS = """() => ({done: !!WOB_DONE_GLOBAL, raw: Number(WOB_RAW_REWARD_GLOBAL),
                      reason: WOB_REWARD_REASON === null ? null : String(WOB_REWARD_REASON)})"""


class MiniWobTask(Task):
    """One MiniWoB++ page. Parameters: ``{"seed": int}``; the goal is the page's utterance."""

    suite: ClassVar[str] = "miniwob"
    template: ClassVar[str] = "{utterance}"
    max_steps: ClassVar[int] = 15
    #: whether :meth:`oracle` can solve the task
    has_oracle: ClassVar[bool] = False
    #: whether one seed and the same actions can give other screens (:data:`NONDETERMINISTIC`)
    nondeterministic: ClassVar[bool] = False
    #: a page's state lives in its script's closures (the expected answer, counters, timers), which no
    #: browser API can read: a snapshot holds the seed and the actions, and a restore plays them again
    #: and checks that the screen came back byte for byte (pages that move with time do not)
    snapshot_mode: ClassVar[str] = "replay"

    @classmethod
    def snapshot_support(cls, device: Device) -> str | None:
        if cls.task_id in MOVES_WITH_TIME:
            return (f"{cls.task_id} moves with time, not only with actions: a replay cannot bring its "
                    "screen back")
        return None

    def __init__(self, params: dict[str, Any]):
        super().__init__(params)
        self.utterance: str | None = None
        self._plan: Any = None

    @classmethod
    def sample_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"seed": rng.randrange(2**31)}

    @classmethod
    def url(cls) -> str:
        return (html_dir() / "miniwob" / f"{cls.task_id}.html").as_uri()

    @property
    def goal(self) -> str:
        return self.utterance or ""

    def setup(self, device: Device) -> str:
        dev = _browser(device)
        dev.goto(self.url(), reset_history=True)
        dev.evaluate(_START_JS, int(self.params["seed"]))
        try:
            # most pages are ready at once; wait_for_function's own polling costs ~150 ms
            if not dev.evaluate("() => WOB_TASK_READY === true"):
                dev.page.wait_for_function("() => WOB_TASK_READY === true", timeout=10_000)
        except Exception as e:
            raise DeviceError(f"{self.task_id}: the page did not become ready: {e}") from e
        dev.settle()
        dev.evaluate("() => window.scrollTo(0, 0)")
        # Most pages return a string; some (e.g. the email and social-media pages) return an
        # object {utterance, fields}: the goal is its text either way.
        utterance = dev.evaluate("() => core.getUtterance()")
        if isinstance(utterance, dict):
            utterance = utterance.get("utterance") or str(utterance)
        self.utterance = str(utterance)
        self._plan = None
        return self.utterance

    def snapshot(self, device: Device) -> tuple[Any, Any]:
        """What a replay does not bring back: where the window is scrolled (a drag that selects text
        towards the page's edge scrolls it for as long as the button is held: a matter of time)."""
        return {"scroll": _browser(device).evaluate("() => [scrollX, scrollY]")}, None

    def restore(self, device: Device, state: Any) -> None:
        scroll = (state.task or {}).get("scroll") if isinstance(state.task, dict) else None
        if isinstance(scroll, list) and len(scroll) == 2 and all(isinstance(v, (int, float)) for v in scroll):
            dev = _browser(device)
            if dev.evaluate("() => [scrollX, scrollY]") != scroll:
                dev.evaluate("([x, y]) => window.scrollTo(x, y)", scroll)
                dev.settle()
        return None

    def state(self, device: Device) -> dict[str, Any]:
        """``{"done": bool, "raw": float, "reason": str|None}`` straight from the page."""
        return _browser(device).evaluate(_STATE_JS)

    def is_done(self, device: Device) -> bool:
        return bool(self.state(device)["done"])

    def evaluate(self, device: Device, answer: str | None = None) -> float:
        st = self.state(device)
        return 1.0 if st["done"] and st["raw"] > 0 else 0.0

    def oracle(self, device: Device) -> Action | None:
        solver = ORACLES.get(self.task_id)
        if solver is None:
            return None
        if self._plan is None:
            self._plan = solver(_browser(device), self.utterance or "")
        return next_action(self._plan)


def _browser(device: Device) -> Any:
    # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
    from emulators.browser import BrowserDevice
    if not isinstance(device, BrowserDevice):
        raise TypeError(f"miniwob tasks run on a BrowserDevice, got {type(device).__name__}")
    return device


def make_task_class(name: str) -> type[MiniWobTask]:
    """The task class for page ``name`` (``click-button`` -> ``ClickButton``)."""
    cls_name = "".join(part.capitalize() for part in name.replace("_", "-").split("-"))
    attrs = {"task_id": name, "has_oracle": name in ORACLES, "nondeterministic": name in NONDETERMINISTIC,
             "__doc__": f"MiniWoB++ task `{name}`."}
    if name in MAX_STEPS:
        attrs["max_steps"] = MAX_STEPS[name]
    return type(cls_name, (MiniWobTask,), attrs)


@lru_cache(maxsize=1)
def _classes() -> dict[str, type[MiniWobTask]]:
    return {name: make_task_class(name) for name in page_names()}


def TASK_CLASSES() -> dict[str, type[MiniWobTask]]:  # noqa: N802 (reads as a table)
    """Task id -> class, for every page (generated once)."""
    return dict(_classes())
