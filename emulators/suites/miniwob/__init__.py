"""The ``miniwob`` suite: MiniWoB++ task pages in a :class:`~emulators.browser.BrowserDevice`.

Viewport: the task area of every page is the 160x210 CSS-pixel box at its top
left (the reward and timer displays sit to its right), so the device's viewport
*is* that box and screenshots show only the task. ``scale`` (default 1, giving
160x210 screenshots) enlarges them for models that want more pixels; 2 or 3 keep
the page's layout and only sharpen it.

Example::

    from emulators.suites import make
    env = make("guiagent/miniwob.click-button")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.oracle_action())
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emulators.base import Device
from emulators.suites.base import Suite
from emulators.suites.miniwob.tasks import MiniWobTask, TASK_CLASSES, html_dir, page_names

__all__ = ["MiniWobSuite", "SUITE", "MiniWobTask", "TASK_AREA", "device_config", "RANDOM_LAYOUT_TASKS",
           "BENCHMARK_TASKS", "TASK_SETS"]

#: width, height of a MiniWoB++ task area in CSS pixels
TASK_AREA = (160, 210)

#: tasks whose goal names the target and whose page puts it somewhere new each seed (buttons at random
#: places, link words at random in random text, the named tab among several, radio options in random
#: order, widgets of random kinds in random order): finding the element the goal names, wherever it is.
#: Each has an oracle; with ``marks`` on, each is solved through element actions (tests/emulators/test_marks.py).
RANDOM_LAYOUT_TASKS: tuple[str, ...] = ("click-button", "click-link", "click-tab", "click-option", "click-widget")
#: the benchmark set (configs/train_miniwob_bench.yaml; docs/results.md, "MiniWoB++ beside the published
#: table"): the tasks of the 54 that RCI reports per task (Kim et al. 2023; Synapse, CC-Net and the human
#: figures report each of them too, docs/miniwob_published.csv) that an agent can solve from the screen's
#: element list with element actions: single clicks on a named element, multi-step clicks (options,
#: checkboxes, sequences, sections, tabs explored one after the other), typing into fields (text,
#: passwords, a login, a login a popup interrupts) and choosing from a list. Left out: targets known only by
#: their look (click-color, click-shades, click-shape, count-shape, grid-coordinate, identify-shape,
#: tic-tac-toe); widgets the element actions cannot drive yet (use-spinner's arrows, the date and time
#: pickers of enter-date and enter-time, use-autocomplete's menu that opens under the field, the hover
#: menus of click-menu, click-scroll-list's multiple selection); text reasoning (guess-number,
#: simple-algebra, terminal, text-transform, click-checkboxes-soft's synonyms); forms whose fields have no
#: accessible name and change order (multi-layouts, multi-orderings); pages of repeated names or many
#: screens (email-inbox*, social-media*, navigate-tree, search-engine). Each has an oracle that solves it
#: through element actions (tests/emulators/test_miniwob_bench.py).
BENCHMARK_TASKS: tuple[str, ...] = (
    "choose-list", "click-button", "click-button-sequence", "click-checkboxes", "click-checkboxes-large",
    "click-checkboxes-transfer", "click-collapsible", "click-collapsible-2", "click-dialog", "click-dialog-2",
    "click-link", "click-option", "click-tab", "click-tab-2", "click-tab-2-hard", "click-test", "click-test-2",
    "click-widget", "enter-password", "enter-text", "enter-text-dynamic", "focus-text", "focus-text-2",
    "login-user", "login-user-popup")
#: named training task sets of this suite (``Suite.task_sets``)
TASK_SETS: dict[str, tuple[str, ...]] = {"random-layout": RANDOM_LAYOUT_TASKS, "benchmark": BENCHMARK_TASKS}


def device_config(*, scale: float = 1.0, tree: str = "aria", image_format: str = "png",
                  settle_timeout_ms: int = 1500, **overrides: Any) -> Any:
    """The :class:`~emulators.browser.BrowserConfig` miniwob pages run in."""
    # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
    from emulators.browser import BrowserConfig
    if isinstance(scale, str):  # from the command line (--device scale 2)
        try:
            scale = float(scale)
        except ValueError:
            raise ValueError(f"scale must be a number, got {scale!r}") from None
    return BrowserConfig(
        viewport=TASK_AREA, device_scale_factor=scale, tree=tree, image_format=image_format,
        settle_timeout_ms=settle_timeout_ms, allowed_origins=(html_dir().as_uri() + "/",),
        reuse_context=True, **overrides)


class MiniWobSuite(Suite):
    """Every page of ``miniwob/html/miniwob`` as a task; ids are the page names."""

    name = "miniwob"
    TASK_SETS = TASK_SETS

    def task_ids(self) -> list[str]:
        return list(page_names())

    def task_class(self, task_id: str) -> type[MiniWobTask]:
        classes = TASK_CLASSES()
        if task_id not in classes:
            raise KeyError(f"unknown miniwob task {task_id!r}; known: {', '.join(sorted(classes))}")
        return classes[task_id]

    def oracle_task_ids(self) -> list[str]:
        """Tasks whose oracle solves them."""
        return [t for t, cls in TASK_CLASSES().items() if cls.has_oracle]

    def check_device_options(self, options: Mapping[str, Any]) -> None:
        # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
        from emulators.browser import check_config_options
        from emulators.suites.webapps import check_chromium_path  # lazy: as above (the webapps task modules)

        check_config_options(device_config, options, suite=self.name, takes=("scale",),
                             fixed=("viewport", "allowed_origins", "device_scale_factor", "reuse_context"))
        check_chromium_path(options)

    def make_device(self, *, browser: Any = None, **options: Any) -> Device:
        """A browser device for miniwob pages; ``options`` go to :func:`device_config`."""
        # lazy: the browser device (asyncio, ~35 ms); `import emulators` lists tasks without it
        from emulators.browser import BrowserDevice
        return BrowserDevice(device_config(**options), browser=browser)


SUITE = MiniWobSuite()
