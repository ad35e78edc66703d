"""Browser device: one Playwright page in Chromium, desktop or phone emulation.

The agent sees screenshots (plus, optionally, the ARIA snapshot of the page as
text) and acts through normalised coordinates: a point ``(x, y)`` in [0, 1] maps
to CSS pixel ``(x * viewport_w, y * viewport_h)``.

**Settling.** After each action the device waits until the page is quiet instead
of sleeping a fixed time. An init script in every frame records DOM mutations,
pending ``fetch``/XHR, pending one-shot timers (with their due time) and started
document navigations; the device polls that state inside the page until nothing
is pending: no request in flight, no ``setTimeout`` due before the deadline, no
*finite* animation or CSS transition running (``document.getAnimations()``), no
navigation under way and the document complete. Infinite animations (spinners,
``animation-iteration-count: infinite``) and ``setInterval`` are ignored: they
never end, so waiting on them would only ever hit the cap. The quiet window is
checked at the screenshot itself: :meth:`BrowserDevice.observe` reads the
mutation count before and after capturing and captures again when the DOM
changed meanwhile. Everything is capped at ``settle_timeout_ms`` per action, so a
page that never settles (one that polls with ever re-armed short timeouts, or holds a
request open) costs at most the cap.

**Navigation guard.** Every request goes through a route: requests to origins
outside ``allowed_origins`` (or ``file://`` urls outside the allowed prefixes) are
aborted, and a blocked main-frame navigation is reported as an
:class:`~emulators.base.ActionError` on the step that caused it, the page going
back to where it was.

**Snapshots.** A page's state lives partly in its script (variables, closures, timers), which no
browser API can read or write, so a generic page cannot be captured (``can_snapshot`` is False).
A page whose own script can hand its state over and take it back (the webapps suite's
``window.webapps.snapshot`` / ``restore``) is captured with :meth:`BrowserDevice.snapshot_page` and
put back with :meth:`BrowserDevice.restore_page`, in the open document (no page load).

**Faults.** A crashed page, a closed target or a lost browser raise
:class:`~emulators.base.DeviceError` from ``execute``/``observe``; ``reset`` then
opens a fresh page and, when this device launched the browser itself, a fresh
browser. A crashed renderer never answers the device's own CDP calls (Playwright rejects a
page's own calls on a crash, not a CDP session's): on the crash the device closes the page's
context, which fails a call waiting on it at once. A hung renderer (an endless script) answers
nothing either: the device's CDP calls wait at most ``navigation_timeout_ms`` past their own
budget (a settle's), and its input and ``page.evaluate`` calls, which have no timeout in
Playwright, as long under a watchdog that closes the context; one that runs out marks the device
dead as a crash does.

Example::

    from emulators.browser import BrowserConfig, BrowserDevice
    from guiagent.types import Click
    dev = BrowserDevice(BrowserConfig.phone(home_url="http://127.0.0.1:8000/"))
    dev.reset()
    dev.execute(Click(0.5, 0.2))
    obs = dev.observe()
    dev.close()
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import re
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence
from urllib.parse import urlsplit

from emulators.base import ActionError, Device, DeviceError
from emulators.hit_point import UNCOVERED_POINT_JS
from emulators.snapshot import DeviceState, SnapshotError
from emulators.browser_support import (
    KEY_EXAMPLES, SETTLE_INIT_SCRIPT, SETTLE_POLL_JS, VERSION_JS, BrowserHandle, ChromiumNotFound, build_marks, launch,
    normalise_key, origin_of, url_allowed,
)
from guiagent.types import (
    ELEMENT_ACTION_TYPES, Action, Click, DoubleClick, Drag, ElementNotFound, Hover, Key, LongPress, Mark,
    NavigateBack, NavigateHome, Observation, OpenApp, RightClick, Scroll, Swipe, Type, Wait, resolve_element,
)

__all__ = ["BrowserConfig", "BrowserDevice", "BrowserHandle", "ChromiumNotFound", "launch_browser"]

MOBILE_USER_AGENT = ("Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 "
                     "(KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36")


_BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class BrowserConfig:
    """How the browser device looks and behaves.

    ``viewport`` is in CSS pixels; screenshots are ``viewport * device_scale_factor``
    pixels. ``allowed_origins`` are ``scheme://host:port`` origins (and, for
    ``file://``, url prefixes) the page may load; empty means only the origin of
    ``home_url`` (read at each request, so a suite may change ``device.home_url`` per
    episode). ``block_file_urls=False`` lets every ``file://`` url load.
    ``tree='aria'`` adds ``locator('body').aria_snapshot()`` text to each observation
    (taken while the screenshot is captured). ``reuse_context`` keeps one browser
    context across ``reset`` calls (faster: cookies are cleared, but local storage and the
    cache are not), otherwise each ``reset`` opens a new context. A reused context is
    still replaced after ``context_max_resets`` resets: Playwright keeps a record of every
    navigation's request and response for the context's life (in this process and in its
    driver, up to 10,000 of each), about two per episode, so one context kept for a worker's
    whole life would grow both by megabytes an hour.
    ``in_page_reset`` lets a suite start an episode in the open document through the page's own
    hook instead of a page load (:meth:`BrowserDevice.reset_in_page`); ``False`` always loads the page.
    ``marks`` numbers the page's visible interactive or named elements in each observation
    (``Observation.marks``, for element actions and the ``marks`` action format): two CDP calls sent
    with the screenshot (the accessibility tree and a DOM snapshot, see
    :func:`~emulators.browser_support.build_marks`); off by default, so pages that need none pay nothing.
    ``tree_cache`` reuses the last observation's ARIA tree when the page has not changed since in
    any way the tree reads (the settle script's version, ``VERSION_JS``: the same document, no DOM
    mutation, shadow roots made by scripts included, no input, change, focus, popover, toggle, end
    of a transition or animation, no new element under the pointer, no form control's value,
    checked or selected state set by a script); the screenshot is always taken. Pages with
    subframes are always read. A tap on an empty spot then costs no tree (~8-9 ms of CPU);
    ``False`` reads it at every observation.
    ``target_boxes`` reads, before each tap, the box of the element it lands on (one page round trip,
    ~1.2 ms; ``BrowserDevice.target_box``), recorded with the step so that a replay can count any
    point on the same element as the same action (semi-online RL on recorded episodes, offline
    metrics); ``False`` skips it, for online training whose episodes are never replayed.
    """

    viewport: tuple[int, int] = (1280, 720)
    mobile: bool = False
    device_scale_factor: float = 1.0
    chromium_path: str | None = None
    headless: bool = True
    tree: Literal["aria", "none"] = "aria"
    image_format: Literal["png", "jpeg"] = "png"
    jpeg_quality: int = 80
    settle_timeout_ms: int = 1500
    allowed_origins: tuple[str, ...] = ()
    home_url: str | None = None
    block_file_urls: bool = True
    reuse_context: bool = False
    context_max_resets: int = 100
    in_page_reset: bool = True
    #: JavaScript run in every document before the page's own (after the settle script)
    init_script: str = ""
    user_agent: str | None = None
    locale: str = "en-US"
    timezone_id: str = "UTC"
    #: limit for navigations and page queries (tree, locators); beyond it the device is dead
    navigation_timeout_ms: int = 15000
    #: number the page's elements in each observation (``Observation.marks``)
    marks: bool = False
    #: reuse the last ARIA tree while the page has not changed in any way the tree reads
    tree_cache: bool = True
    #: read the element under a tap before it (``BrowserDevice.target_box``, recorded with the step)
    target_boxes: bool = True

    def __post_init__(self) -> None:
        # values from the command line come as text (--device in_page_reset false settle_timeout_ms 3000)
        for name in ("mobile", "headless", "block_file_urls", "reuse_context", "in_page_reset", "marks",
                     "tree_cache", "target_boxes"):
            value = getattr(self, name)
            if isinstance(value, str):
                if value.lower() not in _BOOL_WORDS:
                    raise ValueError(f"{name} must be true or false, got {value!r}")
                object.__setattr__(self, name, _BOOL_WORDS[value.lower()])
        for name, kind in (("jpeg_quality", int), ("settle_timeout_ms", int), ("context_max_resets", int),
                           ("navigation_timeout_ms", int), ("device_scale_factor", float)):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    value = kind(value.strip())
                except ValueError:
                    raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}, "
                                     f"got {value!r}") from None
                object.__setattr__(self, name, value)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if isinstance(self.viewport, str):  # "360x640"
            w, sep, h = self.viewport.lower().partition("x")
            try:
                object.__setattr__(self, "viewport", (int(w), int(h)) if sep else ())
            except ValueError:
                object.__setattr__(self, "viewport", ())
            if not self.viewport:
                raise ValueError(f"viewport must read WIDTHxHEIGHT (e.g. 360x640), got {w + sep + h!r}")
        if isinstance(self.allowed_origins, str):  # comma-separated
            object.__setattr__(self, "allowed_origins",
                               tuple(o.strip() for o in self.allowed_origins.split(",") if o.strip()))
        if len(self.viewport) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in self.viewport):
            raise ValueError(f"viewport must be two whole numbers of CSS pixels, got {self.viewport!r}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must lie in 1..100, got {self.jpeg_quality}")
        if self.navigation_timeout_ms <= 0:
            raise ValueError(f"navigation_timeout_ms must be positive, got {self.navigation_timeout_ms}")
        w, h = self.viewport
        if w <= 0 or h <= 0:
            raise ValueError(f"viewport must be positive, got {self.viewport}")
        if self.device_scale_factor <= 0:
            raise ValueError(f"device_scale_factor must be positive, got {self.device_scale_factor}")
        if self.tree not in ("aria", "none"):
            raise ValueError(f"tree must be 'aria' or 'none', got {self.tree!r}")
        if self.image_format not in ("png", "jpeg"):
            raise ValueError(f"image_format must be 'png' or 'jpeg', got {self.image_format!r}")
        if self.settle_timeout_ms < 0:
            raise ValueError("settle_timeout_ms must be >= 0")
        if self.context_max_resets < 1:
            raise ValueError(f"context_max_resets must be >= 1, got {self.context_max_resets}")
        if isinstance(self.allowed_origins, str):
            raise TypeError("allowed_origins is a tuple of origins, not one string")

    @classmethod
    def phone(cls, **overrides: Any) -> "BrowserConfig":
        """A 360x640 CSS-pixel phone: touch, mobile user agent, scale 1 (small screenshots)."""
        return cls(**{"viewport": (360, 640), "mobile": True, "device_scale_factor": 1.0, **overrides})

    @classmethod
    def desktop(cls, **overrides: Any) -> "BrowserConfig":
        """A 1280x720 desktop window with a mouse."""
        return cls(**{"viewport": (1280, 720), "mobile": False, **overrides})

    @property
    def screen_size(self) -> tuple[int, int]:
        """Screenshot size in pixels."""
        return (round(self.viewport[0] * self.device_scale_factor),
                round(self.viewport[1] * self.device_scale_factor))


def check_config_options(build: Callable[..., BrowserConfig], options: Mapping[str, Any], *, suite: str,
                         extra: Iterable[str] = (), takes: Iterable[str] = (), fixed: Iterable[str] = ()) -> None:
    """Raise ``ValueError`` (one line) for device options a suite's browser devices would refuse,
    without starting anything: a name that is neither a :class:`BrowserConfig` field nor one of the
    suite's own, one the suite sets itself (``fixed``), or a value the config refuses.
    ``build(**options)`` makes the suite's config; the suite's own options are those ``build``
    takes beside the fields (``takes``) and those checked elsewhere, left out of it (``extra``)."""
    extra, fixed = set(extra), set(fixed)
    known = ({f.name for f in fields(BrowserConfig)} | extra | set(takes)) - fixed
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        raise ValueError(f"unknown device option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for "
                         f"{suite} (known: {', '.join(sorted(known))})")
    try:
        build(**{k: v for k, v in options.items() if k not in extra})
    except TypeError as e:  # a value of the wrong kind (from Python rather than the command line)
        raise ValueError(str(e)) from None


def launch_browser(config: BrowserConfig | None = None) -> BrowserHandle:
    """Start one Chromium that several :class:`BrowserDevice` can share (one context each)."""
    config = config or BrowserConfig()
    return launch(config.chromium_path, headless=config.headless)


_CONTEXTMENU_JS = """([x, y]) => {
    const el = document.elementFromPoint(x, y);
    if (el) el.dispatchEvent(new MouseEvent('contextmenu', {bubbles: true, cancelable: true,
        composed: true, clientX: x, clientY: y, button: 2, buttons: 0}));
}"""


#: the element a point lands on: its nearest interactive ancestor (or itself), as the page stands
_TARGET_JS = """([x, y]) => {
    const el = document.elementFromPoint(x, y);
    if (!el) return null;
    const t = el.closest('a[href], button, input, select, textarea, label, summary, [onclick], '
        + '[role=button], [role=link], [role=switch], [role=checkbox], [role=radio], [role=tab], '
        + '[role=menuitem], [role=option], [role=treeitem], [tabindex]:not([tabindex="-1"])') || el;
    const r = t.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
}"""
#: the point of an element (``this``: its DOM node) an element action taps, in CSS pixels, given its mark's box
#: ``b`` as last observed: ``null`` where the box's centre (and the pixels around it) hits the element (or
#: something inside it), as a person's tap there would; else the point nearest the centre, of a 9 x 9 grid over the box, that does
#: (another element drawn over the centre: a button overlapping a button); ``null`` again where none does
#: (the element covered whole, or not hit-testable: the centre then, as it always was)
_VISIBLE_POINT_JS = ("function(b) { const el = this.nodeType === 1 ? this : this.parentElement; "
                     "return (" + UNCOVERED_POINT_JS + ")(el, b); }")
#: the cheap look first (one call, no DOM handle): whether the element hit at the box's centre and at the pixels
#: around it is one whose box is the mark's box ``b``, or lies inside one (a label inside its button): then nothing
#: covers the centre and it is tapped there, as :data:`_VISIBLE_POINT_JS` would say after three calls
_CENTRE_OURS_JS = """(b) => {
    const same = (r) => Math.abs(r.left - b[0]) < 1.5 && Math.abs(r.top - b[1]) < 1.5
        && Math.abs(r.right - b[2]) < 1.5 && Math.abs(r.bottom - b[3]) < 1.5;
    const ours = (x, y) => {
        for (let n = document.elementFromPoint(x, y), i = 0; n && i < 64; n = n.parentElement, i++)
            if (same(n.getBoundingClientRect())) return true;
        return false;
    };
    const cx = (b[0] + b[2]) / 2, cy = (b[1] + b[3]) / 2;
    return ours(cx, cy) && ours(cx - 1, cy) && ours(cx + 1, cy) && ours(cx, cy - 1) && ours(cx, cy + 1);
}"""
#: a "target" covering more of the screen than this is a container, not something one taps
_MAX_TARGET_AREA = 0.25
#: DOMSnapshot.captureSnapshot: layout boxes and clickability only (no computed styles: cheaper)
_SNAPSHOT_OPTS = {"computedStyles": [], "includePaintOrder": False, "includeDOMRects": False}
#: the page's mutation count and version (``VERSION_JS``), or the fallback given where there is no settle script
_MARK_JS = "(fallback) => window.__ga ? [window.__ga.mutations, " + VERSION_JS + "] : fallback"
#: :meth:`BrowserDevice.reset_in_page`'s script around the page's hook (``HOOK``), then the settle's
#: poll (``POLL``) in the same call: ``false``, or the page's settle state once it shows the url
_IN_PAGE_RESET_JS = """async ([url, wait]) => {
    const g = window.__ga;
    if (!g || g.navigating || g.fetches > 0 || document.readyState !== 'complete') return false;
    if (!(await (HOOK)(url))) return false;
    for (const id of Array.from(g.timers.keys())) clearTimeout(id);
    getSelection().removeAllRanges();
    if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
    return await (POLL)(wait);
}"""


#: :meth:`BrowserDevice.snapshot_page`'s script around the page's capture (``CAPTURE``): only a quiet page
_SNAPSHOT_JS = """async (wait) => {
    const g = window.__ga;
    if (!g) return {busy: 'no settle script'};
    const s = await (POLL)(wait);
    if (s.busy) return {busy: s.why};
    const data = (CAPTURE)();
    return data ? {data: data} : {busy: 'the page cannot capture its state now'};
}"""
#: :meth:`BrowserDevice.restore_page`'s script around the page's restore (``RESTORE``), then the
#: settle's poll (``POLL``) in the same call: ``false``, or the page's settle state once restored
_RESTORE_JS = """async ([data, rewrite, wait]) => {
    const g = window.__ga;
    if (!g || g.navigating || g.fetches > 0 || document.readyState !== 'complete') return false;
    for (const id of Array.from(g.timers.keys())) clearTimeout(id);
    getSelection().removeAllRanges();
    if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
    if (!(await (RESTORE)(data, rewrite))) return false;
    return await (POLL)(wait);
}"""


#: what :meth:`BrowserDevice.observe` holds for the page's DOM version when the document went away
#: between its capture and the check after it: equal to nothing the page reports
_GONE = object()


def _action_budget_ms(action: Action, config: "BrowserConfig") -> float:
    """How long an action may take by itself (a hold, a swipe, a Wait, typing, a page load with its
    own timeout, a settle inside it), before the device's watchdog gives its page
    ``navigation_timeout_ms`` more."""
    duration = float(getattr(action, "duration_ms", 0) or 0)
    budget = duration + config.settle_timeout_ms
    if isinstance(action, (NavigateBack, NavigateHome, OpenApp)):  # page loads, under their own timeout
        budget += config.navigation_timeout_ms
    if isinstance(action, (Swipe, Drag)):  # a move every 16 ms of it, each waiting a frame: 10 fps allowed
        budget += max(3, duration // 16) * 100
    if isinstance(action, Wait):
        budget += float(action.seconds) * 1000
    text = getattr(action, "text", None)
    if isinstance(text, str):
        budget += 20.0 * len(text)
    return budget


def _closed_error(e: Exception) -> bool:
    text = str(e)
    return any(s in text for s in ("Target closed", "has been closed", "Target crashed", "crashed",
                                   "Browser closed", "Connection closed", "disconnected"))


class BrowserDevice(Device):
    """A Playwright page as a :class:`~emulators.base.Device`.

    ``browser``: a :class:`BrowserHandle` to share; without one the device launches
    (and owns, and relaunches after a crash) its own. Use a device only from the
    thread that created its browser (the sync Playwright API is thread-bound).

    Actions (points are normalised, ``x * viewport_w`` CSS pixels; outside [0, 1] is an
    :class:`ActionError`):

    * ``Click``: mouse click on desktop, touchscreen tap on a phone.
    * ``DoubleClick``: mouse double click on desktop, two taps on a phone.
    * ``RightClick`` / ``Hover``: right mouse click / pointer move on desktop; on a phone
      (no mouse) an :class:`ActionError` that says what to do instead.
    * ``LongPress``: press, hold ``duration_ms``, release (touch via CDP on a phone, where a
      hold of 500 ms or more also fires ``contextmenu`` at the element, as Android does).
    * ``Type``: tap/click ``(x, y)`` first if given; typing with no editable element focused
      is an ActionError; ``submit`` presses Enter.
    * ``Scroll``: mouse wheel at ``(x, y)`` (default centre) by ``amount`` of the viewport;
      ``down`` reveals what lies below. Wheel scrolling works on phones too.
    * ``Swipe``: a touch drag on a phone (CDP ``Input.dispatchTouchEvent``), a mouse drag on desktop.
    * ``Drag``: mouse down, move in steps, up.
    * ``Key``: Playwright key names and common aliases (``enter``, ``ctrl+a``, ``esc``);
      unknown names are an ActionError listing examples.
    * ``NavigateBack``: history back; on the episode's first page an ActionError.
    * ``NavigateHome``: load ``home_url``; none set is an ActionError.
    * ``OpenApp``: calls ``open_app_handler(name)``; without one an ActionError.
    * ``Wait``: waits the given seconds (the agent's own choice), then settles.
    * ``ClickElement`` / ``LongPressElement`` / ``TypeElement``: the same action at the centre of the
      numbered element in the last observation's marks (``BrowserConfig.marks``), or, where another
      element is drawn over that centre, at the nearest point of its box the element itself takes
      (``element_point`` says where, and the step records it: ``StepInfo.tap_point``); an unknown
      number, or no marks, is an ActionError.

    Extras for suites and oracles (agents see only observations): ``page``,
    ``config``, ``home_url`` (settable), ``goto``, ``evaluate``, ``locate``, ``center``,
    ``scroll_into_view``, ``size``, ``open_app_handler``.
    """

    def __init__(self, config: BrowserConfig | None = None, *, browser: BrowserHandle | None = None):
        self.config = config or BrowserConfig()
        self._handle = browser
        self._owns_browser = browser is None
        self.home_url: str | None = self.config.home_url
        #: called with the app name on :class:`OpenApp`; ``None``: the device has no apps
        self.open_app_handler: Callable[[str], None] | None = None
        self._context: Any = None
        self._page: Any = None
        self._cdp: Any = None
        self._dead: str | None = None
        self._blocked: list[str] = []
        self._closed = False
        #: the last settle's (mutation count, version): what observe() compares its capture with
        self._quiet: tuple[int, str | None] | None = None
        #: (version, url, tree) of the last tree read (BrowserConfig.tree_cache)
        self._tree_cache: tuple[str, str, str] | None = None
        #: observations whose ARIA tree was read from the page / reused (``BrowserConfig.tree_cache``)
        self.tree_reads = 0
        self.tree_reuses = 0
        self._popup_url: str | None = None
        self._watched_browser: Any = None
        self._context_resets = 0  # resets on the current context (see BrowserConfig.context_max_resets)
        #: the last observation's marks: what an element action's number means (None: not observed yet)
        self._marks: tuple[Mark, ...] | None = None
        #: their DOM nodes (mark id -> backendNodeId), where an element action looks for a point nothing covers
        self._mark_nodes: dict[int, int] = {}
        self._captured_nodes: dict[int, int] = {}

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def page(self) -> Any:
        """The Playwright ``Page`` (after :meth:`reset`)."""
        if self._page is None:
            raise DeviceError("the browser device has no page yet; call reset() first")
        return self._page

    @property
    def size(self) -> tuple[int, int]:
        """Screenshot size in pixels."""
        return self.config.screen_size

    @property
    def allowed_origins(self) -> tuple[str, ...]:
        if self.config.allowed_origins:
            return self.config.allowed_origins
        return (origin_of(self.home_url),) if self.home_url else ()

    def _ensure_browser(self) -> BrowserHandle:
        if self._handle is not None and self._handle.connected:
            return self._handle
        if not self._owns_browser:
            raise DeviceError("the shared browser is gone; relaunch it and make a new device")
        if self._handle is not None:
            self._handle.close()
        self._handle = launch_browser(self.config)
        return self._handle

    def _new_context(self) -> None:
        handle = self._ensure_browser()
        c = self.config
        options: dict[str, Any] = {
            "viewport": {"width": c.viewport[0], "height": c.viewport[1]},
            "device_scale_factor": c.device_scale_factor, "is_mobile": c.mobile, "has_touch": c.mobile,
            "locale": c.locale, "timezone_id": c.timezone_id, "service_workers": "block",
        }
        ua = c.user_agent or (MOBILE_USER_AGENT if c.mobile else None)
        if ua:
            options["user_agent"] = ua
        self._context = handle.browser.new_context(**options)
        self._context.set_default_timeout(c.navigation_timeout_ms)
        self._context.add_init_script(SETTLE_INIT_SCRIPT)
        if c.init_script:
            self._context.add_init_script(c.init_script)
        self._context.route(self._route_pattern(), self._route)
        self._context.on("page", self._on_popup)
        self._page = self._context.new_page()
        context = self._context
        self._page.on("crash", lambda _p: self._on_crash(context))
        self._page.on("dialog", self._on_dialog)
        if self._watched_browser is not handle.browser:  # one listener per browser, not per reset
            self._watched_browser = handle.browser
            handle.browser.on("disconnected", lambda _b: self._mark_dead("the browser disconnected"))
        self._cdp = self._context.new_cdp_session(self._page)

    def _on_crash(self, context: Any) -> None:
        """The page's renderer crashed. Its CDP session's calls would never be answered (Playwright
        rejects a crashed page's own calls, not a session's): closing its context rejects them now,
        so a device call waiting on the page fails at once instead of running out its timeout."""
        if context is not self._context:  # a crash of a page already replaced
            return
        self._mark_dead("the page crashed")
        try:
            context.close()
        except Exception:  # closing it as the browser goes
            pass

    def _drop_context(self) -> None:
        ctx, self._context, self._page, self._cdp = self._context, None, None, None
        if ctx is not None:
            try:
                ctx.close()
            except Exception:  # already gone with a crashed browser
                pass

    def reset(self) -> None:
        """A clean page at ``home_url`` (``about:blank`` without one), after a crash too."""
        if self._closed:
            raise DeviceError("the device was closed")
        from playwright.sync_api import Error as PlaywrightError
        try:
            if (self._dead or not self.config.reuse_context or self._context is None
                    or self._context_resets >= self.config.context_max_resets):
                self._drop_context()
                self._dead = None
                self._new_context()
                self._context_resets = 0
            else:
                self._context.clear_cookies()
            self._context_resets += 1
            self._blocked.clear()
            self._marks = None
            self._goto(self.home_url or "about:blank")
            self._send("Page.resetNavigationHistory")
        except PlaywrightError as e:
            # the next reset starts from a fresh context: this one may hold a hung page
            self._mark_dead(f"could not open a fresh page: {str(e).splitlines()[0]}")
            raise DeviceError(f"could not open a fresh page: {e}") from e

    def reset_in_page(self, url: str, hook: str) -> bool:
        """Start over at ``url`` without a page load, where the open page can do it itself: ``hook`` is
        the source of a JavaScript function of the url, the page's own (an app that renders another of
        its pages in the open document), resolving to true once the document shows ``url`` as a fresh
        load would.

        Attempted only when nothing can carry over: ``in_page_reset`` and ``reuse_context`` on, a live
        context not yet due for replacement (``context_max_resets``, counting these resets too), a page of ``url``'s origin with the settle script in it, quiet (no request in flight, no
        navigation started, document complete). As :meth:`reset` does, it clears cookies and leaves
        this page alone in the history; besides, the old document's pending timers are cancelled and
        its selection and focus dropped. Returns False when it was not done (the caller then calls
        :meth:`reset`, which loads the page whatever the hook changed); what the hook did outside the
        page by then (a request it made) is the caller's to undo.
        """
        c = self.config
        if (not c.in_page_reset or not c.reuse_context or self._closed or self._dead or self._page is None
                or self._context_resets >= c.context_max_resets  # due for a new context: reset() opens it
                or origin_of(url) != origin_of(self._page.url)):
            return False
        from playwright.sync_api import Error as PlaywrightError
        try:
            self._context.clear_cookies()
            self._blocked.clear()
            self._popup_url = None
            self._quiet = None
            self._marks = None
            script = _IN_PAGE_RESET_JS.replace("POLL", SETTLE_POLL_JS.strip(), 1).replace("HOOK", hook, 1)
            settled = self._js(script, [url, c.settle_timeout_ms], c.settle_timeout_ms)  # the hook and the settle, one call
            if not settled:
                return False
            self._send("Page.resetNavigationHistory")
            if isinstance(settled, dict):  # quiet, or still busy when the poll's time ran out: as _settle() leaves it
                self._quiet = (settled.get("mutations"), settled.get("version"))
            else:
                self._settle()
            self._context_resets += 1
        except (PlaywrightError, DeviceError):  # a hook that threw, a page that died or hung: the caller
            return False                            # loads the page (a fresh context for a dead one)
        return not self._dead and self.page.url == url

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._drop_context()
        if self._owns_browser and self._handle is not None:
            self._handle.close()

    # --- snapshots ----------------------------------------------------------------------------

    def _layout_key(self) -> list[Any]:
        """What a page's layout depends on: a page state restores only onto the same."""
        c = self.config
        return [list(c.viewport), c.mobile, c.device_scale_factor, c.user_agent or "", c.locale, c.timezone_id]

    def state_key(self) -> str:
        """Everything an observation of a page depends on besides the page: the layout, what the
        observation holds (tree, marks, image format) and the browser that renders it."""
        c = self.config
        try:  # Playwright keeps the version from the launch: no round trip
            version = self._handle.browser.version if self._handle is not None else ""
        except Exception:
            version = ""
        return json.dumps([self._layout_key(), c.tree, c.image_format, c.jpeg_quality, c.marks, c.init_script,
                           c.headless, c.chromium_path or "", version])

    def snapshot_page(self, capture: str) -> DeviceState:
        """The open page's state as its own script captures it: ``capture`` is the source of a
        JavaScript function returning plain data (or null when the page cannot now). Taken on a quiet
        page only (nothing in flight, no timer due, no animation; waited for up to ``settle_timeout_ms``):
        :class:`SnapshotError` otherwise,
        or when the page's history holds entries its script does not see (another origin's)."""
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        try:
            got = self._js(_SNAPSHOT_JS.replace("POLL", SETTLE_POLL_JS.strip(), 1)
                                     .replace("CAPTURE", capture, 1), self.config.settle_timeout_ms,
                           self.config.settle_timeout_ms)
            hist = self._send("Page.getNavigationHistory")
            url = self.page.url
        except PlaywrightError as e:
            raise self._wrap(e) from e
        if not isinstance(got, dict) or "data" not in got:
            raise SnapshotError(f"the page cannot be captured now: {(got or {}).get('busy', 'no answer')}")
        data = got["data"]
        entries = data.get("entries") if isinstance(data, dict) else None
        if isinstance(entries, list) and (len(entries) != len(hist["entries"])
                                          or data.get("index") != hist["currentIndex"]):
            raise SnapshotError("the page's history holds pages its script does not see (another origin's)")
        return DeviceState("browser-page", {"page": data, "url": url, "layout": self._layout_key(),
                                            "key": self.state_key()})

    def restore_page(self, state: DeviceState, restore: str, *, url: str,
                     rewrite: Sequence[tuple[str, str]] = ()) -> bool:
        """Put back a :meth:`snapshot_page` state through the page's own script: ``restore`` is the
        source of a JavaScript function of ``(data, rewrite)`` that resolves to true once the document
        stands as captured (``rewrite``: url prefixes to map, e.g. another session's urls to this
        one's). It runs in the open document when that is a quiet page of ``url``'s origin in a
        context not due for replacement; otherwise ``url`` is loaded first (a page whose script can
        restore). Cookies are cleared, the history is the captured one, the old document's timers,
        selection and focus are gone. The restored page must settle within ``settle_timeout_ms``, as
        the captured one had (a state is captured on a quiet page only). No element boxes are kept:
        element actions wait for the next :meth:`observe`, which reads them off the page as it is
        (the caller checks that page against what was captured).

        Returns whether a page was loaded (the server saw a request). :class:`SnapshotError` when
        the state was taken on another layout (viewport, scale, user agent), the page did not take
        it back, or was still busy when the settle time ran out; :class:`DeviceError` when the
        device died."""
        if self._closed:
            raise DeviceError("the device was closed")
        data = state.data if state.kind == "browser-page" else None
        if not isinstance(data, Mapping) or not isinstance(data.get("page"), Mapping):
            raise SnapshotError(f"not a browser page state: {state.kind}")
        if data.get("layout") != self._layout_key():
            raise SnapshotError(f"the page was captured on another screen ({data.get('layout')}); "
                                f"this device is {self._layout_key()}")
        from playwright.sync_api import Error as PlaywrightError
        c = self.config
        loaded = False
        if (self._dead or self._page is None or not c.reuse_context
                or self._context_resets >= c.context_max_resets
                or origin_of(url) != origin_of(self._page.url)):
            home, self.home_url = self.home_url, url
            try:
                self.reset()
            finally:
                self.home_url = home
            loaded = True
        try:
            self._context.clear_cookies()
            self._blocked.clear()
            self._popup_url = None
            self._quiet = None
            self._send("Page.resetNavigationHistory")
            script = _RESTORE_JS.replace("POLL", SETTLE_POLL_JS.strip(), 1).replace("RESTORE", restore, 1)
            args = [dict(data["page"]), [list(p) for p in rewrite], c.settle_timeout_ms]
            # the restore and the settle in one call (a round trip less a reset by restore)
            settled = self._js(script, args, c.settle_timeout_ms)
            if not settled and not loaded:  # a busy page or one without the script: load one and try again
                home, self.home_url = self.home_url, url
                try:
                    self.reset()
                finally:
                    self.home_url = home
                loaded = True
                self._send("Page.resetNavigationHistory")
                settled = self._js(script, args, c.settle_timeout_ms)
            if not settled:
                raise SnapshotError("the page did not take the state back")
            hist = self._send("Page.getNavigationHistory")
            entries = data["page"].get("entries")
            if isinstance(entries, list) and (len(hist["entries"]) != len(entries)
                                              or hist["currentIndex"] != data["page"].get("index")):
                raise SnapshotError("the restored history is not the captured one")
            if not loaded:
                self._context_resets += 1
            if isinstance(settled, dict):  # quiet, or still busy when the poll's time ran out: as _settle() leaves it
                self._quiet = (settled.get("mutations"), settled.get("version"))
            else:
                settled = self._settle()
            self._marks = None  # the captured page's boxes are not this page's until it is observed
            if settled.get("busy"):  # a quiet page was captured: one still changing is not it (yet)
                self._quiet = None
                raise SnapshotError(f"the restored page was still busy ({settled.get('why') or 'unknown'}) when "
                                    f"the settle time ({c.settle_timeout_ms} ms) ran out: not restored")
        except PlaywrightError as e:
            raise self._wrap(e) from e
        if self._dead:
            raise DeviceError(self._dead)
        return loaded

    # --- events -----------------------------------------------------------------------------

    def _mark_dead(self, reason: str) -> None:
        self._dead = self._dead or reason

    def _route(self, route: Any) -> None:
        request = route.request
        url = request.url
        if self._url_ok(url):
            route.continue_()
            return
        if request.is_navigation_request() and request.frame.parent_frame is None:
            self._blocked.append(url)
        route.abort("blockedbyclient")

    def _route_pattern(self) -> Any:
        """Which requests :meth:`_route` sees. With fixed ``allowed_origins`` the driver lets the
        allowed http(s) origins (and ``about:``/``data:``/``blob:``) through by itself: a page load
        then costs no round trip to Python per request (docs/benchmarks.md, "Browser device costs
        behind its design choices"). Everything else still comes to :meth:`_route`, which decides."""
        origins = [a for a in self.config.allowed_origins if urlsplit(a).scheme in ("http", "https")]
        if not origins:  # allowed origins follow home_url, which may change between episodes
            return "**/*"
        alts = "|".join(re.escape(a.rstrip("/")) + r"(?:[/?#]|$)" for a in origins)
        return re.compile(r"^(?!(?:about:|data:|blob:|" + alts + "))")

    def _url_ok(self, url: str) -> bool:
        if url.startswith("file:") and not self.config.block_file_urls:
            return True
        return url_allowed(url, self.allowed_origins)

    def _on_popup(self, page: Any) -> None:
        # A single-tab device: new windows (target=_blank, window.open) load in the main page.
        if self._page is None or page is self._page:  # our own page, still being created
            return
        url = page.url
        try:
            page.close()
        except Exception:
            pass
        self._popup_url = url

    @staticmethod
    def _on_dialog(dialog: Any) -> None:
        # alert/confirm/prompt would block the page forever: accept alerts, dismiss the rest
        try:
            dialog.accept() if dialog.type == "alert" else dialog.dismiss()
        except Exception:
            pass

    # --- helpers for suites and oracles -------------------------------------------------------

    def _guard(self) -> None:
        if self._closed:
            raise DeviceError("the device was closed")
        if self._dead:
            raise DeviceError(self._dead)
        if self._page is None:
            raise DeviceError("the browser device has no page yet; call reset() first")

    def _wrap(self, e: Exception) -> DeviceError:
        if self._dead:
            return DeviceError(self._dead)
        if _closed_error(e):
            self._mark_dead(f"the page or browser closed: {str(e).splitlines()[0]}")
            return DeviceError(self._dead or str(e))
        return DeviceError(f"browser error: {str(e).splitlines()[0]}")

    def _send(self, method: str, params: dict[str, Any] | None = None, budget_ms: float = 0) -> Any:
        """One CDP call of the device's own on this page's session, answered within ``budget_ms`` (the
        time the call itself may take, e.g. a settle's) plus ``navigation_timeout_ms``. A CDP
        session's call on a crashed or hung renderer is never answered (Playwright rejects a page's
        own calls on a crash, not a session's), so one that runs out marks the device dead: the
        ``DeviceError`` then says why and :meth:`reset` opens a fresh page."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        if self._dead:  # a crash heard of already: its calls would never be answered
            raise DeviceError(self._dead)
        if self._cdp is None:  # as the page property says it
            raise DeviceError("the browser device has no page yet; call reset() first")
        timeout = budget_ms + self.config.navigation_timeout_ms
        try:
            return self._cdp.send(method, params, timeout=timeout)
        except PlaywrightTimeout as e:
            raise self._no_answer(method, timeout) from e

    @contextlib.contextmanager
    def _watchdog(self, what: str, budget_ms: float = 0) -> Any:
        """Playwright's input calls and ``page.evaluate`` have no timeout, and a hung renderer (an
        endless script) answers neither. A call inside this block that takes longer than
        ``budget_ms`` (what it may take itself: a long press's hold, a Wait) plus
        ``navigation_timeout_ms`` marks the device dead and closes its context, which fails the call.
        The timer runs on the driver's event loop (a Playwright internal, as the fast capture uses):
        without it, no watchdog."""
        timeout = budget_ms + self.config.navigation_timeout_ms
        try:
            loop, context = self.page._loop, self._context._impl_obj
            close = context.close
        except AttributeError:
            yield
            return

        def fire() -> None:
            self._mark_dead(f"the page did not answer {what} within {timeout / 1000:g} s (a hung renderer)")
            task = loop.create_task(close(None))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # gone already: nothing to say

        timer = loop.call_later(timeout / 1000, fire)
        try:
            yield
        finally:
            timer.cancel()

    def _no_answer(self, what: str, timeout_ms: float) -> DeviceError:
        self._mark_dead(f"the page did not answer {what} within {timeout_ms / 1000:g} s "
                        "(a crashed or hung renderer)")
        return DeviceError(self._dead or what)

    def _js(self, script: str, arg: Any = None, budget_ms: float = 0) -> Any:
        """``page.evaluate(script, arg)`` for the device's own scripts (settle, marks, in-page resets,
        snapshots, target boxes): a function of one plain-JSON argument returning plain JSON, run in
        the page's main world through this page's CDP session (``Runtime.evaluate``), which spares
        the driver's value serialisation and its utility script: 0.8-0.9 ms of CPU a call against
        1.1-1.3 (docs/benchmarks.md, "Browser device costs behind its design choices"). Unlike
        ``page.evaluate`` it gives the page no user activation: the device's bookkeeping is not a
        gesture the page could act on (open a popup, go full screen). A script that throws, or a
        document that goes away under it, raises Playwright's ``Error`` as ``page.evaluate`` does;
        one the page does not answer in time (``budget_ms``, what the script may wait itself, plus
        ``navigation_timeout_ms``) raises :class:`DeviceError` as :meth:`_send` does."""
        from playwright.sync_api import Error as PlaywrightError
        # json.dumps escapes every non-ASCII character: the argument is a JavaScript literal as it stands
        r = self._send("Runtime.evaluate", {"expression": f"({script})({json.dumps(arg)})",
                                            "awaitPromise": True, "returnByValue": True}, budget_ms)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise PlaywrightError(str((d.get("exception") or {}).get("description") or d.get("text") or "script error"))
        return r.get("result", {}).get("value")

    def _goto(self, url: str) -> None:
        self.page.goto(url, wait_until="load")
        self._settle()

    def goto(self, url: str, *, reset_history: bool = False) -> None:
        """Navigate and settle (a suite's setup step). ``reset_history`` makes this page the
        first of the history, so NavigateBack cannot leave it."""
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        try:
            self._goto(url)
            if reset_history:
                self._send("Page.resetNavigationHistory")
        except PlaywrightError as e:
            raise self._wrap(e) from e

    def settle(self) -> None:
        """Wait until the page is quiet (what every action does), e.g. after suite set-up."""
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        try:
            self._settle()
        except PlaywrightError as e:
            raise self._wrap(e) from e

    def evaluate(self, js: str, arg: Any = None) -> Any:
        """Run JavaScript in the page (``page.evaluate``); for suites and oracles only."""
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        try:
            with self._watchdog("a script"):
                return self.page.evaluate(js, arg)
        except PlaywrightError as e:
            if self._dead or _closed_error(e):
                raise self._wrap(e) from e
            raise

    def locate(self, selector: str) -> tuple[float, float, float, float] | None:
        """Box ``(x0, y0, x1, y1)`` of the first visible match, normalised to the viewport.

        Any Playwright selector works (CSS, ``text=...``, ``role=...``). The box is
        clipped to the viewport; ``None`` when nothing matches or it lies off-screen.
        """
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        loc = self.page.locator(selector)
        box = None
        try:
            for i in range(min(loc.count(), 20)):
                item = loc.nth(i)
                if item.is_visible():
                    box = item.bounding_box(timeout=1000)
                    if box:
                        break
        except PlaywrightError as e:
            if self._dead or _closed_error(e):
                raise self._wrap(e) from e
            raise
        if not box:
            return None
        w, h = self.config.viewport
        x0, y0 = max(0.0, box["x"] / w), max(0.0, box["y"] / h)
        x1, y1 = min(1.0, (box["x"] + box["width"]) / w), min(1.0, (box["y"] + box["height"]) / h)
        if x1 <= x0 or y1 <= y0:
            return None
        return (x0, y0, x1, y1)

    def center(self, selector: str) -> tuple[float, float] | None:
        """Normalised centre of :meth:`locate`'s box, ``None`` if not on screen."""
        box = self.locate(selector)
        return None if box is None else ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)

    def scroll_into_view(self, selector: str) -> None:
        """Scroll the first match into view (oracles and setup; agents scroll with actions)."""
        self._guard()
        self.page.locator(selector).first.scroll_into_view_if_needed(timeout=2000)
        self._settle()

    # --- settling -----------------------------------------------------------------------------

    def _settle(self, cap_ms: float | None = None) -> dict[str, Any]:
        """Wait until the page is quiet (see the module docstring), at most ``cap_ms``."""
        from playwright.sync_api import Error as PlaywrightError
        cap = self.config.settle_timeout_ms if cap_ms is None else cap_ms
        deadline = time.perf_counter() + cap / 1000
        state: dict[str, Any] = {"busy": True, "why": "start"}
        while True:
            remaining = (deadline - time.perf_counter()) * 1000
            try:
                state = self._js(SETTLE_POLL_JS, max(0.0, remaining), max(0.0, remaining))
            except PlaywrightError as e:
                if self._dead or _closed_error(e):
                    raise
                # the document went away under us (a navigation): wait for the next one
                state = {"busy": True, "why": "navigation"}
                try:
                    self.page.wait_for_load_state("load", timeout=max(1.0, remaining))
                except PlaywrightError:
                    pass
            if not state.get("busy") or time.perf_counter() >= deadline:
                # observe() compares this count with the one after its capture (saves a round trip)
                self._quiet = (state.get("mutations"), state.get("version"))
                return state

    # --- observe ----------------------------------------------------------------------------

    def observe(self) -> Observation:
        """Screenshot, ARIA tree and url; captured again if the DOM changed during capture."""
        return self._observe(self.config.tree == "aria")

    def observe_screen(self) -> Observation:
        """:meth:`observe` without the ARIA tree (``tree=None``): the screenshot, the marks where they
        are on, and the url, at the cost of the screenshot alone (what a restore checks its screen with)."""
        return self._observe(False)

    def _observe(self, want_tree: bool) -> Observation:
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        c = self.config
        # CDP's capture with optimizeForSpeed (fast zlib level) is faster than page.screenshot
        # (docs/benchmarks.md). It captures CSS pixels, though, and its clip scale breaks Playwright's
        # device-scale emulation, so scaled screens go through page.screenshot.
        fast = c.device_scale_factor == 1
        if fast:
            shot_opts: dict[str, Any] = {"format": c.image_format, "optimizeForSpeed": True}
        else:
            shot_opts = {"type": c.image_format, "animations": "allow", "caret": "initial"}
        if c.image_format == "jpeg":
            shot_opts["quality"] = c.jpeg_quality
        try:
            for attempt in range(3):
                quiet, self._quiet = self._quiet, None
                before, version = quiet if quiet is not None else self._js(_MARK_JS, [-1, None])
                url = self.page.url
                cached = self._tree_cache
                reuse = (want_tree and c.tree_cache and version is not None and cached is not None
                         and cached[0] == version and cached[1] == url)
                shot, tree, marks = self._capture(fast, shot_opts, want_tree and not reuse, c.marks)
                try:
                    after, version_after = self._js(_MARK_JS, [-2, None])
                except PlaywrightError as e:
                    if self._dead or _closed_error(e):
                        raise
                    # the document went away under the check (a navigation the page made): not the
                    # captured one any more; settled again and captured again below
                    after, version_after = _GONE, None
                if reuse:
                    tree = cached[2]  # type: ignore[index]
                    self.tree_reuses += 1
                elif want_tree:
                    self.tree_reads += 1
                if before == after and (version_after == version or not reuse):
                    break
                self._settle(cap_ms=min(200, c.settle_timeout_ms))
            url = self.page.url
            if want_tree and c.tree_cache:
                # kept only when nothing the tree reads changed while it was read
                self._tree_cache = ((version_after, url, tree) if version_after is not None
                                    and version_after == version and tree is not None else None)
        except PlaywrightError as e:
            raise self._wrap(e) from e
        w, h = self.size
        self._marks, self._mark_nodes = marks, (self._captured_nodes if marks is not None else {})
        return Observation(screenshot=shot, width=w, height=h, tree=tree, url=url, marks=marks)

    #: whether this Playwright's internals allow capturing and reading the tree at once
    _overlap_ok: bool = True

    def _capture(self, fast: bool, shot_opts: dict[str, Any], want_tree: bool, want_marks: bool = False
                 ) -> tuple[bytes, str | None, tuple[Mark, ...] | None]:
        """Screenshot, ARIA tree and marks. The fast path sends the requests at once through the
        sync API's event loop (the capture waits on the compositor while the renderer builds
        the trees); it uses Playwright internals, so any mismatch falls back
        to one request after the other for good."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        if fast and (want_tree or want_marks) and BrowserDevice._overlap_ok:
            try:
                cdp, body = self._cdp._impl_obj, self.page.locator("body")._impl_obj

                async def nothing() -> None:
                    return None

                t = self.config.navigation_timeout_ms

                async def all_at_once() -> Any:
                    return await asyncio.gather(
                        cdp.send("Page.captureScreenshot", shot_opts, t),
                        body.aria_snapshot(timeout=t, depth=None, mode=None, boxes=None) if want_tree else nothing(),
                        cdp.send("Accessibility.getFullAXTree", {}, t) if want_marks else nothing(),
                        cdp.send("DOMSnapshot.captureSnapshot", _SNAPSHOT_OPTS, t) if want_marks else nothing())
                if self._dead:  # as _send: a crashed page's session never answers
                    raise DeviceError(self._dead)
                try:
                    result, tree, ax, snap = self.page._sync(all_at_once())
                except PlaywrightTimeout as e:
                    raise self._no_answer("a capture", t) from e
                self._captured_nodes = {}
                marks = (build_marks(ax["nodes"], snap, self.config.viewport, self._captured_nodes)
                         if want_marks else None)
                return base64.b64decode(result["data"]), tree, marks
            except (AttributeError, TypeError):
                BrowserDevice._overlap_ok = False
        shot = (base64.b64decode(self._send("Page.captureScreenshot", shot_opts)["data"])
                if fast else self.page.screenshot(**shot_opts))
        tree = (self.page.locator("body").aria_snapshot(timeout=self.config.navigation_timeout_ms)
                if want_tree else None)
        self._captured_nodes = {}
        return shot, tree, self._read_marks(self._captured_nodes) if want_marks else None

    def _read_marks(self, nodes: dict[int, int] | None = None) -> tuple[Mark, ...]:
        ax = self._send("Accessibility.getFullAXTree")
        snap = self._send("DOMSnapshot.captureSnapshot", _SNAPSHOT_OPTS)
        return build_marks(ax["nodes"], snap, self.config.viewport, nodes)

    def marks(self) -> tuple[Mark, ...]:
        """The page's marks as it stands now (what :meth:`observe` adds with ``marks`` on; for suites,
        oracles and checks: an agent sees the observation's)."""
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        try:
            return self._read_marks()
        except PlaywrightError as e:
            raise self._wrap(e) from e

    # --- execute ----------------------------------------------------------------------------

    def _point(self, x: float | None, y: float | None) -> tuple[float, float]:
        if x is None or y is None:
            w, h = self.config.viewport
            return (w / 2, h / 2)
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
            raise ActionError(f"point ({x}, {y}) is off-screen: coordinates are fractions of the screen in [0, 1]")
        w, h = self.config.viewport
        # 1.0 would be one pixel past the last column
        return (min(x * w, w - 0.5), min(y * h, h - 0.5))

    def execute(self, action: Action) -> None:
        """Carry out ``action`` and settle. See :class:`BrowserDevice` for each kind."""
        self._guard()
        from playwright.sync_api import Error as PlaywrightError
        self.element_point = None
        action = self._resolve(action)
        self._blocked.clear()
        self._popup_url = None
        url_before = self.page.url
        try:
            with self._watchdog("an action", _action_budget_ms(action, self.config)):
                self._perform(action)
            self._settle()
            if self._popup_url and self._url_ok(self._popup_url):
                self._goto(self._popup_url)
        except ActionError:
            raise
        except PlaywrightError as e:
            raise self._wrap(e) from e
        if self._dead:
            raise DeviceError(self._dead)
        if self._blocked:
            self._restore(url_before)
            raise ActionError(f"navigation to {self._blocked[0]} was blocked: "
                              f"this device may only visit {', '.join(self.allowed_origins) or 'its home page'}")
        if self._popup_url and not self._url_ok(self._popup_url):
            raise ActionError(f"navigation to {self._popup_url} was blocked")

    def _resolve(self, action: Action) -> Action:
        """An element action as the point action on its mark (the last observation's marks): at the box's
        centre, or, where another element is drawn over the centre, at the point of the box nearest it
        that the element itself takes (:meth:`_uncovered`); an id those marks do not hold is an
        :class:`ActionError`."""
        if not isinstance(action, ELEMENT_ACTION_TYPES):
            return action
        try:
            point = resolve_element(action, self._marks)
        except ElementNotFound as e:
            raise ActionError(str(e)) from None
        mark = next(m for m in self._marks or () if m.id == action.element)
        better = self._uncovered(mark)
        point = point if better is None else replace(point, x=better[0], y=better[1])
        self.element_point = (point.x, point.y)
        return point

    def _uncovered(self, mark: Mark) -> tuple[float, float] | None:
        """A point (normalised) of ``mark``'s box, nearest its centre, where a tap reaches the mark's own
        DOM node, when something else covers the centre; ``None`` when the centre is the element's, or the
        node is gone or cannot be asked (the centre is tapped then, as without this check)."""
        node = self._mark_nodes.get(mark.id)
        if node is None or self._dead:
            return None
        from playwright.sync_api import Error as PlaywrightError
        w, h = self.config.viewport
        box = [mark.box[0] * w, mark.box[1] * h, mark.box[2] * w, mark.box[3] * h]
        try:
            if self._js(_CENTRE_OURS_JS, box) is True:
                return None  # the usual case, in one call
            obj = self._send("DOM.resolveNode", {"backendNodeId": node})["object"]["objectId"]
            try:
                got = self._send("Runtime.callFunctionOn", {
                    "objectId": obj, "functionDeclaration": _VISIBLE_POINT_JS, "arguments": [{"value": box}],
                    "returnByValue": True})
            finally:
                self._send("Runtime.releaseObject", {"objectId": obj})
        except (PlaywrightError, KeyError, TypeError):  # the node went away since the observation
            return None
        value = got.get("result", {}).get("value") if isinstance(got, dict) else None
        if not (isinstance(value, list) and len(value) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
            return None
        x, y = value[0] / w, value[1] / h
        # the page runs the search: whatever it answers, the tap stays inside the element's own box
        x0, y0, x1, y1 = mark.box
        return (x, y) if x0 <= x <= x1 and y0 <= y <= y1 else None

    def target_box(self, action: Action) -> tuple[float, float, float, float] | None:
        """The box ``(x0, y0, x1, y1)``, normalised to the viewport, of the element a point action is
        about to land on (its nearest interactive ancestor: a link, button, input, an ARIA control), as
        the page stands before the action; ``None`` for other actions, an empty spot, or a container
        covering over a quarter of the screen. Recorded with each step (``Step.metadata["target_box"]``),
        it lets a replay of the episode count any point on the same element as the same action."""
        if isinstance(action, ELEMENT_ACTION_TYPES):  # the element's own box, as the agent saw it
            found = [m for m in self._marks or () if m.id == action.element]
            return found[0].box if found and found[0].area <= _MAX_TARGET_AREA else None
        x, y = getattr(action, "x", None), getattr(action, "y", None)
        if not isinstance(action, (Click, LongPress, DoubleClick, RightClick)) or x is None or y is None:
            return None
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0) or self._dead or not self.config.target_boxes:
            return None
        from playwright.sync_api import Error as PlaywrightError
        try:
            r = self._js(_TARGET_JS, list(self._point(x, y)))
        except PlaywrightError:
            return None  # the action itself will report a dead page
        if not r:
            return None
        w, h = self.config.viewport
        x0, y0 = max(0.0, r[0] / w), max(0.0, r[1] / h)
        x1, y1 = min(1.0, r[2] / w), min(1.0, r[3] / h)
        if x1 <= x0 or y1 <= y0 or (x1 - x0) * (y1 - y0) > _MAX_TARGET_AREA:
            return None
        return (round(x0, 5), round(y0, 5), round(x1, 5), round(y1, 5))

    def _restore(self, url_before: str) -> None:
        """Undo a blocked navigation (which leaves Chromium's error page behind)."""
        try:
            if self.page.url != url_before:
                hist = self._send("Page.getNavigationHistory")
                idx = hist["currentIndex"]
                if idx > 0 and hist["entries"][idx - 1]["url"] == url_before:
                    self._send("Page.navigateToHistoryEntry", {"entryId": hist["entries"][idx - 1]["id"]})
                else:
                    self.page.goto(url_before, wait_until="load")
                self._settle()
        except Exception:
            pass

    def _perform(self, action: Action) -> None:
        page = self.page
        mobile = self.config.mobile
        if isinstance(action, Click):
            x, y = self._point(action.x, action.y)
            if mobile:
                page.touchscreen.tap(x, y)
            else:
                page.mouse.click(x, y)
        elif isinstance(action, DoubleClick):
            x, y = self._point(action.x, action.y)
            if mobile:  # a double tap: two taps, as a finger does it
                page.touchscreen.tap(x, y)
                page.touchscreen.tap(x, y)
            else:
                page.mouse.dblclick(x, y)
        elif isinstance(action, (RightClick, Hover)):
            if mobile:
                what = "right button" if isinstance(action, RightClick) else "pointer to hover with"
                hint = "use LongPress for a context menu" if isinstance(action, RightClick) else "tap instead"
                raise ActionError(f"a touch screen has no {what}; {hint}")
            x, y = self._point(action.x, action.y)
            if isinstance(action, RightClick):
                page.mouse.click(x, y, button="right")
            else:
                page.mouse.move(x, y)
        elif isinstance(action, LongPress):
            x, y = self._point(action.x, action.y)
            if mobile:
                self._touch("touchStart", [(x, y)])
                page.wait_for_timeout(action.duration_ms)
                if action.duration_ms >= 500:
                    # Android fires contextmenu while the finger is held; headless Linux Chromium
                    # does not, so the device fires it at the pressed element itself.
                    page.evaluate(_CONTEXTMENU_JS, [x, y])
                self._touch("touchEnd", [])
            else:
                page.mouse.move(x, y)
                page.mouse.down()
                page.wait_for_timeout(action.duration_ms)
                page.mouse.up()
        elif isinstance(action, Type):
            self._type(action)
        elif isinstance(action, Scroll):
            self._scroll(action)
        elif isinstance(action, Swipe):
            p1, p2 = self._point(action.x1, action.y1), self._point(action.x2, action.y2)
            if mobile:
                self._touch_drag(p1, p2, action.duration_ms)
            else:
                self._mouse_drag(p1, p2, steps=max(2, action.duration_ms // 16))
        elif isinstance(action, Drag):
            self._mouse_drag(self._point(action.x1, action.y1), self._point(action.x2, action.y2), steps=10)
        elif isinstance(action, Key):
            key = normalise_key(action.key)
            if key is None:
                raise ActionError(f"unknown key {action.key!r}; examples: {KEY_EXAMPLES}")
            page.keyboard.press(key)
        elif isinstance(action, NavigateBack):
            hist = self._send("Page.getNavigationHistory")
            idx = hist["currentIndex"]
            if idx <= 0:
                raise ActionError("there is no earlier page to go back to")
            entry = hist["entries"][idx - 1]
            self._send("Page.navigateToHistoryEntry", {"entryId": entry["id"]})
            # the command returns once the traversal started: wait for it to reach the page (a page
            # that renders its entries itself shows the url at once, then settles on its request)
            from playwright.sync_api import Error as PlaywrightError
            try:
                page.wait_for_function("(url) => location.href === url", arg=entry["url"], polling=10,
                                       timeout=self.config.settle_timeout_ms or 1)
            except PlaywrightError:
                pass
        elif isinstance(action, NavigateHome):
            if not self.home_url:
                raise ActionError("this device has no home page")
            page.goto(self.home_url, wait_until="load")
        elif isinstance(action, OpenApp):
            if self.open_app_handler is None:
                raise ActionError("this device has no apps to open")
            self.open_app_handler(action.app)
        elif isinstance(action, Wait):
            page.wait_for_timeout(float(action.seconds) * 1000)
        else:
            raise ActionError(f"the browser device cannot perform {getattr(action, 'kind', action)!r}")

    def _type(self, action: Type) -> None:
        page = self.page
        if action.x is not None:
            x, y = self._point(action.x, action.y)
            page.touchscreen.tap(x, y) if self.config.mobile else page.mouse.click(x, y)
            self._settle(cap_ms=min(300, self.config.settle_timeout_ms))
        editable = page.evaluate("""() => {
            let el = document.activeElement;
            while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
            while (el && el.tagName === 'IFRAME') {
              try { el = el.contentDocument.activeElement; } catch (e) { return true; }
            }
            if (!el || el === document.body || el === document.documentElement) return false;
            return el.isContentEditable || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT'
                || (el.tagName === 'INPUT' && !el.disabled);
        }""")
        if not editable:
            raise ActionError("nothing is focused to type into: click a text field first "
                              "(or give Type the field's x, y)")
        if action.text:
            page.keyboard.type(action.text)
        if action.submit:
            page.keyboard.press("Enter")

    def _scroll(self, action: Scroll) -> None:
        x, y = self._point(action.x, action.y)
        w, h = self.config.viewport
        dx = {"left": -1, "right": 1}.get(action.direction, 0) * action.amount * w
        dy = {"up": -1, "down": 1}.get(action.direction, 0) * action.amount * h
        self.page.mouse.move(x, y)
        self.page.mouse.wheel(dx, dy)
        self._frames(2)

    def _frames(self, n: int) -> None:
        """Let ``n`` frames pass: wheel and touch scrolls are applied on the next compositor frame,
        after their input call returns, so settling right away could miss them."""
        from playwright.sync_api import Error as PlaywrightError
        try:
            self._js("(n) => new Promise(r => { const f = () => --n <= 0 ? r() : "
                     "requestAnimationFrame(f); requestAnimationFrame(f); })", n)
        except PlaywrightError as e:
            if self._dead or _closed_error(e):
                raise
            # the gesture opened another document: its frames are the next one's, which the settle waits for

    def _touch(self, kind: str, points: list[tuple[float, float]]) -> None:
        self._send("Input.dispatchTouchEvent", {
            "type": kind, "touchPoints": [{"x": px, "y": py} for px, py in points]})

    def _touch_drag(self, p1: tuple[float, float], p2: tuple[float, float], duration_ms: int) -> None:
        steps = max(3, duration_ms // 16)
        self._touch("touchStart", [p1])
        for i in range(1, steps + 1):
            t = i / steps
            self._touch("touchMove", [(p1[0] + (p2[0] - p1[0]) * t, p1[1] + (p2[1] - p1[1]) * t)])
        self._touch("touchEnd", [])
        self._frames(2)

    def _mouse_drag(self, p1: tuple[float, float], p2: tuple[float, float], steps: int) -> None:
        mouse = self.page.mouse
        mouse.move(*p1)
        mouse.down()
        mouse.move(*p2, steps=steps)
        mouse.up()
