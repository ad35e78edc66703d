"""Pieces of the browser device that need no page: Chromium discovery and launch,
key-name normalisation, origin checks and the page-side settle script.

Kept apart from :mod:`emulators.browser` so that file reads as the device itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import urlsplit

import greenlet

from guiagent.types import Mark

__all__ = [
    "ChromiumNotFound", "find_chromium", "BrowserHandle", "launch", "connect_over_cdp", "normalise_key",
    "origin_of", "url_allowed", "run_concurrently", "Flight", "SETTLE_INIT_SCRIPT", "SETTLE_POLL_JS", "VERSION_JS", "CHROMIUM_ARGS",
    "build_marks", "INTERACTIVE_ROLES", "NAMED_ROLES",
]

#: flags that work headless on a plain Linux box without a GPU or a sandbox
CHROMIUM_ARGS: tuple[str, ...] = (
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
    # wheel scrolls land at once instead of animating for ~150 ms: settling need not guess
    "--disable-smooth-scrolling",
)

_SYSTEM_CHROMIUMS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
                     "/usr/bin/google-chrome-stable")
#: Chromium's headless shell (Debian's ``chromium-headless-shell``; the binary, not the wrapper
#: script, so the browser's process is the one launched): the same Blink, without the full
#: browser around it. Headless, it renders the same screenshots at less CPU (18% less a tap step,
#: 27% less a page load: docs/benchmarks.md, "Browser device costs behind its design choices").
_HEADLESS_SHELLS = ("/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium-headless-shell",
                    "/usr/bin/chrome-headless-shell")


class ChromiumNotFound(RuntimeError):
    """No Chromium executable could be found."""


def find_chromium(configured: str | None = None, *, headless: bool = False) -> str | None:
    """The Chromium to launch: ``configured``, else ``$GUIAGENT_CHROMIUM``, else a system one
    (for ``headless``, a headless shell first when one is installed).

    Returns ``None`` when only Playwright's own bundled browser remains to try
    (Playwright then raises if it is not installed either).
    """
    for candidate in (configured, os.environ.get("GUIAGENT_CHROMIUM")):
        if candidate:
            if not (Path(candidate).is_file() and os.access(candidate, os.X_OK)):
                raise ChromiumNotFound(f"Chromium at {candidate!r} is not an executable file; {_HOW}")
            return candidate
    for path in (_HEADLESS_SHELLS if headless else ()) + _SYSTEM_CHROMIUMS:
        if Path(path).is_file() and os.access(path, os.X_OK):
            return path
    shells = ("chromium-headless-shell", "chrome-headless-shell") if headless else ()
    for name in (*shells, "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


_HOW = ("install one with `apt-get install chromium` (or `playwright install chromium`), "
        "or set GUIAGENT_CHROMIUM=/path/to/chromium")
_INSTALL_HINT = f"no Chromium found: {_HOW}"


@dataclass
class BrowserHandle:
    """A running Playwright driver and one Chromium, shareable by several devices.

    The sync Playwright API is bound to the thread that started it: create, use
    and close a handle (and the devices on it) from one thread.
    """

    playwright: Any
    browser: Any
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    _closed: bool = False
    _driver: Any = None  # the _Driver of the thread that made it (released on close, whichever thread closes)

    @property
    def connected(self) -> bool:
        return not self._closed and self.browser.is_connected()

    def pid(self) -> int | None:
        """Process id of the main Chromium process (found by the unique flag it was started with)."""
        needle = f"--guiagent-tag={self.tag}".encode()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if needle in argv and not any(a.startswith(b"--type=") for a in argv):
                return int(entry.name)
        return None

    def close(self) -> None:
        """Close the browser and stop the driver. Safe to call twice, also after a crash."""
        if self._closed:
            return
        self._closed = True
        try:
            self.browser.close()
        except Exception:  # a dead browser has nothing left to close (or, from another thread, cannot)
            pass
        _release_playwright(self._driver)

    def __enter__(self) -> "BrowserHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_local = threading.local()


def _forget_drivers_in_forked_child() -> None:
    """After ``os.fork``, in the child: forget the threads' Playwright drivers without closing them (they
    are the parent's: the child's copies talk to the parent's driver over pipes both processes hold, so a
    browser started through them answers the wrong process). The child's first launch starts its own."""
    global _local
    _local = threading.local()


os.register_at_fork(after_in_child=_forget_drivers_in_forked_child)


@dataclass
class _Driver:
    """One thread's Playwright driver and how many handles use it."""

    playwright: Any
    users: int = 0


def _thread_playwright() -> _Driver:
    """The calling thread's Playwright driver, started on first use.

    The sync API allows one running Playwright per thread, so every handle made in a
    thread shares it; it stops when the last of them closes. A handle keeps the driver
    it was made on, so closing it from another thread (a pool made by a rollout thread and
    closed by the main one) still releases the right one.
    """
    from playwright.sync_api import sync_playwright
    driver = getattr(_local, "driver", None)
    if driver is None or driver.users == 0:
        driver = _local.driver = _Driver(sync_playwright().start())
    driver.users += 1
    return driver


def _release_playwright(driver: _Driver | None) -> None:
    if driver is None:
        return
    driver.users -= 1
    if driver.users == 0:
        try:
            driver.playwright.stop()
        except Exception:  # a driver that died with its browser, or one of another thread
            pass


def launch(chromium_path: str | None = None, *, headless: bool = True) -> BrowserHandle:
    """Start one Chromium (and this thread's Playwright driver if needed).

    Raises :class:`ChromiumNotFound` with install advice when there is no Chromium.
    """
    from playwright.sync_api import Error as PlaywrightError

    executable = find_chromium(chromium_path, headless=headless)
    driver = _thread_playwright()
    tag = uuid.uuid4().hex
    try:
        browser = driver.playwright.chromium.launch(executable_path=executable, headless=headless,
                                                    args=[*CHROMIUM_ARGS, f"--guiagent-tag={tag}"])
    except PlaywrightError as e:
        _release_playwright(driver)
        if executable is None and "Executable doesn't exist" in str(e):
            raise ChromiumNotFound(_INSTALL_HINT) from None
        raise
    return BrowserHandle(driver.playwright, browser, tag, _driver=driver)


def connect_over_cdp(endpoint_url: str) -> BrowserHandle:
    """Attach this thread's Playwright to a Chromium already running with a debugging port
    (``--remote-debugging-port``): how several threads share one browser, since a Playwright
    ``Browser`` object may only be used from the thread that made it. ``close`` detaches and
    removes the contexts made through it; the browser keeps running."""
    driver = _thread_playwright()
    try:
        browser = driver.playwright.chromium.connect_over_cdp(endpoint_url)
    except Exception:
        _release_playwright(driver)
        raise
    return BrowserHandle(driver.playwright, browser, _driver=driver)


T = TypeVar("T")


def run_concurrently(anchor: Any, calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``calls`` (each driving pages of this thread's Playwright through the sync API)
    side by side; their results in order.

    The sync API waits for Chromium by switching to Playwright's dispatcher greenlet, which
    runs the event loop until the answer arrives. Each call here gets a greenlet of its own
    (as Playwright runs its route and event handlers), so while one page waits for Chromium
    (a navigation, a screenshot, a settle poll) the others go on: one thread, no locks,
    every device still used from the thread that made it. Code between two sync calls runs
    alone, so the calls interleave only where they would wait. ``anchor`` is any sync
    Playwright object of this thread (the shared ``Browser``); it gives the loop.

    Every call runs to its end even if another raised; the first exception is then re-raised.
    Called from inside a greenlet of this kind (or with one call) it runs the calls one after
    another.
    """
    sync = getattr(anchor, "_sync", None)
    if len(calls) < 2 or sync is None or greenlet.getcurrent().parent is not None:
        return [c() for c in calls]

    def start(call: Callable[[], T]) -> "asyncio.Future[T]":
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def body() -> None:
            try:
                future.set_result(call())
            except Exception as e:  # handed to the caller after every call ended
                future.set_exception(e)
        # runs until its first wait for Chromium, then comes back here (its parent)
        greenlet.greenlet(body).switch()
        return future

    async def all_of() -> list[Any]:
        return await asyncio.gather(*[start(c) for c in calls], return_exceptions=True)

    results = sync(all_of())
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


class Flight:
    """Calls side by side on this thread's Playwright loop, handed back as they end.

    :func:`run_concurrently` waits for all its calls; a flight hands back whichever calls have
    ended, at least ``least`` of them, and keeps the others going: they move on whenever this
    thread's Playwright loop runs again (the next :meth:`collect`, or any sync call of this
    thread in between), each in a greenlet of its own as there. A caller that acts on the calls
    that ended (a rollout loop on a partial batch) is then not held up by the slowest.

    A call may wait for another to end first (``after``: its key): it starts the moment that one
    ends (the same greenlet rules; its future counts as in flight from the start).

    Results come back as ``(key, value)``; a call that raised hands its exception back as the value
    (callers that guard their calls never see one). Keys in flight are unique.
    """

    def __init__(self, anchor: Any):
        self._sync = getattr(anchor, "_sync", None)
        if self._sync is None:
            raise TypeError("a flight needs a sync Playwright object of this thread (the shared Browser)")
        self._futures: dict[Any, "asyncio.Future[Any]"] = {}
        self._ended: list[Any] = []  # keys in the order their calls ended

    def __len__(self) -> int:
        return len(self._futures)

    def __contains__(self, key: Any) -> bool:
        return key in self._futures

    def keys(self) -> list[Any]:
        return list(self._futures)

    def collect(self, calls: Sequence[tuple[Any, Callable[[], Any], Any]] = (), least: int = 1,
                timeout: float | None = None) -> list[tuple[Any, Any]]:
        """Start ``calls`` (``(key, call, after)``: ``after`` None, or the key of a call in flight to
        wait for), then run the loop until at least ``least`` calls in flight have ended (all, when
        fewer are in flight) or ``timeout`` seconds passed; every call that has ended by then, in the
        order they ended."""
        new: set[Any] = set()
        for key, _call, after in calls:
            if key in self._futures or key in new:
                raise ValueError(f"{key!r} is already in flight")
            if after is not None and after not in self._futures and after not in new:
                raise ValueError(f"{key!r} waits for {after!r}, which is not in flight (or not started before it)")
            new.add(key)
        if greenlet.getcurrent().parent is not None:
            raise RuntimeError("a flight is collected from the thread's main greenlet, not from one of its calls")
        ended = self._ended

        async def run() -> list[tuple[Any, Any]]:
            loop = asyncio.get_running_loop()
            for key, call, after in calls:
                self._futures[key] = future = loop.create_future()
                if after is None:
                    _start(call, future, ended, key)
                else:  # starts inside the loop, in the callback of the call it waits for
                    self._futures[after].add_done_callback(lambda _f, c=call, fu=future, k=key: _start(c, fu, ended, k))
            want = min(least, len(self._futures))
            deadline = None if timeout is None else loop.time() + timeout
            while sum(f.done() for f in self._futures.values()) < want:
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    break
                await asyncio.wait([f for f in self._futures.values() if not f.done()], timeout=left,
                                   return_when=asyncio.FIRST_COMPLETED)
            out = []
            for key in ended:
                future = self._futures.pop(key)
                out.append((key, future.exception() or future.result()))
            ended.clear()
            return out

        return self._sync(run())


def _start(call: Callable[[], Any], future: "asyncio.Future[Any]", ended: list[Any] | None = None,
           key: Any = None) -> None:
    """Run ``call`` in a greenlet of its own until its first wait for Chromium (see
    :func:`run_concurrently`); its result or exception goes to ``future`` (and ``key`` to ``ended``)."""
    def body() -> None:
        try:
            value = call()
        except BaseException as e:  # handed to the collector as the call's value
            if ended is not None:
                ended.append(key)
            if not future.done():
                future.set_exception(e)
            if not isinstance(e, Exception):  # an interrupt (or the greenlet's exit) still goes up
                raise
            return
        if ended is not None:
            ended.append(key)
        future.set_result(value)
    greenlet.greenlet(body).switch()


# --- keys -------------------------------------------------------------------------------------

_NAMED_KEYS = {
    "enter": "Enter", "return": "Enter", "tab": "Tab", "backspace": "Backspace", "delete": "Delete",
    "del": "Delete", "escape": "Escape", "esc": "Escape", "space": "Space", "spacebar": "Space",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "home": "Home", "end": "End", "pageup": "PageUp", "pagedown": "PageDown", "pgup": "PageUp",
    "pgdn": "PageDown", "insert": "Insert", "capslock": "CapsLock",
    "ctrl": "Control", "control": "Control", "alt": "Alt", "option": "Alt", "shift": "Shift",
    "meta": "Meta", "cmd": "Meta", "command": "Meta", "super": "Meta", "win": "Meta",
    "controlormeta": "ControlOrMeta",
}
_NAMED_KEYS.update({f"f{i}": f"F{i}" for i in range(1, 13)})

KEY_EXAMPLES = "Enter, Tab, Backspace, Escape, ArrowDown, PageDown, Home, F5, a, Control+a, Shift+Tab"


def normalise_key(key: str) -> str | None:
    """Playwright's name for ``key`` (``"ctrl+a"`` -> ``"Control+a"``), ``None`` if unknown.

    Accepts Playwright names in any case and common aliases (``return``, ``esc``,
    ``cmd``, ``pgdn``...). Chords join with ``+``; a literal plus is ``+`` alone or
    the last part of ``Shift++``.
    """
    key = key.strip()
    if not key:
        return None
    if key == "+":
        return "+"
    parts = key.split("+")
    if parts[-1] == "" and len(parts) >= 3 and parts[-2] == "":  # "Shift++"
        parts = parts[:-2] + ["+"]
    out = []
    for part in parts:
        p = part.strip()
        if len(p) == 1 and p.isprintable():
            out.append(p)
        elif p.lower() in _NAMED_KEYS:
            out.append(_NAMED_KEYS[p.lower()])
        else:
            return None
    return "+".join(out)


# --- origins ----------------------------------------------------------------------------------

def origin_of(url: str) -> str:
    """``scheme://host:port`` of an http(s) url (port made explicit); the url itself otherwise."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:  # malformed port: matches no origin
            return url
        return f"{parts.scheme}://{parts.hostname}:{port}"
    return url


def url_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``url`` may load: http(s) by exact origin, anything else (``file://``) by prefix.

    ``about:``, ``data:`` and ``blob:`` always load: they reach no other host.
    """
    scheme = urlsplit(url).scheme
    if scheme in ("about", "data", "blob"):
        return True
    if scheme in ("http", "https"):
        origin = origin_of(url)
        return any(origin == origin_of(a) for a in allowed if urlsplit(a).scheme in ("http", "https"))
    return any(url.startswith(a) for a in allowed if urlsplit(a).scheme not in ("http", "https"))


# --- settling ---------------------------------------------------------------------------------

#: Runs in every frame before the page's own scripts. Records the time and count of DOM
#: mutations, pending fetch/XHR, pending one-shot timers (with their due time) and whether a
#: document navigation was started, so the device can tell when the page is quiet.
SETTLE_INIT_SCRIPT = r"""
(() => {
  if (window.__ga) return;
  const g = window.__ga = {lastMutation: performance.now(), mutations: 0, fetches: 0,
                          timers: new Map(), navigating: false,
                          setTimeout: window.setTimeout.bind(window)};
  // a single-tab device: links and forms aimed at new windows load in this one
  document.addEventListener('click', (e) => {
    const a = e.target && e.target.closest && e.target.closest('a[target], area[target]');
    if (a && a.target && a.target !== '_self') a.target = '_self';
  }, true);
  document.addEventListener('submit', (e) => {
    if (e.target && e.target.target && e.target.target !== '_self') e.target.target = '_self';
  }, true);
  window.open = function (url) { if (url) location.href = url; return window; };
  g.lastScroll = -1e9;
  window.addEventListener('scroll', () => { g.lastScroll = performance.now(); }, true);
  const onMutation = () => { g.lastMutation = performance.now(); g.mutations++; };
  const observer = new MutationObserver(onMutation);
  const watch = {subtree: true, childList: true, attributes: true, characterData: true};
  observer.observe(document, watch);
  // Shadow roots made by scripts are watched too (a mutation observer stops at a shadow boundary).
  const origAttachShadow = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function () {
    const root = origAttachShadow.apply(this, arguments);
    try { observer.observe(root, watch); } catch (e) { g.unwatched = true; }
    return root;
  };
  // What the ARIA tree reads beyond the DOM's nodes and attributes: form controls' live state
  // (typed text, a checked box, a chosen option: properties, not attributes), focus, the
  // element under the pointer (:hover rules), opened popovers and details, the end of a
  // transition or animation (a rule that hides an element once it ends). Each bumps
  // g.changes; the device reuses a tree while the document, its mutations and these stay the same.
  g.doc = Math.random().toString(36).slice(2) + performance.timeOrigin;
  g.changes = 0;
  const bump = () => { g.changes++; };
  for (const type of ['input', 'change', 'focusin', 'focusout', 'toggle', 'transitionend',
                      'animationend', 'reset', 'select']) {
    window.addEventListener(type, bump, true);
  }
  let hovered = null;
  window.addEventListener('pointerover', (e) => {
    if (e.target !== hovered) { hovered = e.target; g.changes++; }
  }, true);
  const setters = [[window.HTMLInputElement, ['value', 'checked', 'indeterminate']],
                   [window.HTMLTextAreaElement, ['value']],
                   [window.HTMLSelectElement, ['value', 'selectedIndex']],
                   [window.HTMLOptionElement, ['selected']]];
  for (const [cls, props] of setters) {
    if (!cls) continue;
    for (const prop of props) {
      const d = Object.getOwnPropertyDescriptor(cls.prototype, prop);
      if (!d || !d.set || !d.configurable) continue;
      Object.defineProperty(cls.prototype, prop, {
        configurable: true, enumerable: d.enumerable, get: d.get,
        set: function (v) { g.changes++; return d.set.call(this, v); },
      });
    }
  }
  for (const name of ['showPopover', 'hidePopover', 'togglePopover']) {
    const m = window.HTMLElement && HTMLElement.prototype[name];
    if (typeof m === 'function') {
      HTMLElement.prototype[name] = function () { g.changes++; return m.apply(this, arguments); };
    }
  }
  const origSetTimeout = window.setTimeout, origClearTimeout = window.clearTimeout;
  window.setTimeout = function (fn, delay, ...rest) {
    let id;
    const wrapped = typeof fn === 'function'
        ? function () { g.timers.delete(id); return fn.apply(this, arguments); }
        : fn;
    id = origSetTimeout.call(window, wrapped, delay, ...rest);
    if (typeof fn === 'function') g.timers.set(id, performance.now() + (Number(delay) || 0));
    return id;
  };
  window.clearTimeout = function (id) { g.timers.delete(id); return origClearTimeout.call(window, id); };
  const origFetch = window.fetch;
  if (origFetch) {
    window.fetch = function () {
      g.fetches++;
      let p;
      try { p = origFetch.apply(this, arguments); } catch (e) { g.fetches--; throw e; }
      return p.finally(() => { g.fetches--; });
    };
  }
  const origSend = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function () {
    g.fetches++;
    this.addEventListener('loadend', () => { g.fetches--; }, {once: true});
    return origSend.apply(this, arguments);
  };
  if (window.navigation) {
    // a cross-document navigation was started (link, form, location=...): the page will go away
    navigation.addEventListener('navigate', (e) => {
      if (!e.destination.sameDocument && !e.downloadRequest) g.navigating = true;
    });
    navigation.addEventListener('navigateerror', () => { g.navigating = false; });
    // a navigation the page intercepted (an app rendering its next page itself) ended here
    navigation.addEventListener('navigatesuccess', () => { g.navigating = false; });
  }
})();
"""

#: The page's version as the ARIA tree sees it (see ``SETTLE_INIT_SCRIPT``): the same string twice
#: means the same document with no mutation and no change of the kinds it counts in between;
#: ``null`` where a tree read now cannot be vouched for again (no settle script, subframes whose
#: changes this frame does not see, a shadow root it could not watch).
VERSION_JS = ("(window.__ga && !window.__ga.unwatched && !document.querySelector('iframe, frame, object, embed')"
              " ? window.__ga.doc + ':' + window.__ga.mutations + ':' + window.__ga.changes : null)")

#: Waits inside the page (up to ``remaining`` ms) until nothing is pending: no fetch/XHR, no
#: one-shot timer due before the deadline, no finite animation running, no navigation
#: started, document complete. Infinite animations (spinners, ``iterations: Infinity``) and
#: intervals are ignored, they never end. Returns the page state.
SETTLE_POLL_JS = r"""
async (remaining) => {
  const g = window.__ga;
  if (!g) return {busy: true, why: 'no-script'};
  const end = performance.now() + remaining;
  const state = () => {
    let anims = 0;
    for (const a of document.getAnimations()) {
      if (a.playState !== 'running') continue;
      const t = a.effect && a.effect.getComputedTiming();
      if (t && t.iterations !== Infinity && t.endTime !== Infinity) anims++;
    }
    let timers = 0;
    for (const due of g.timers.values()) if (due <= end) timers++;
    const why = g.navigating ? 'navigation' : document.readyState !== 'complete' ? 'loading'
        : g.fetches > 0 ? 'network' : timers > 0 ? 'timer' : anims > 0 ? 'animation'
        : performance.now() - g.lastScroll < 50 ? 'scrolling' : '';
    return {busy: why !== '', why, mutations: g.mutations, version: VERSION};
  };
  for (;;) {
    const s = state();
    if (!s.busy || performance.now() >= end) return s;
    await new Promise(r => g.setTimeout(r, 10));
  }
}
""".replace("VERSION", VERSION_JS)


# --------------------------------------------------------------------------------------------- marks
# The numbered elements of a page (guiagent.types.Mark), from two CDP calls made beside the
# screenshot: ``Accessibility.getFullAXTree`` (Chromium's own roles and accessible names, and which
# nodes are hidden) and ``DOMSnapshot.captureSnapshot`` (every node's layout box, and whether it
# responds to clicks, listeners added from script included, which no role shows: MiniWoB's links are
# spans with d3 click handlers). Their cost: docs/grounding.md, "Marks and element actions".

#: roles a person acts on: always marked when visible
INTERACTIVE_ROLES = frozenset({
    "button", "link", "textbox", "searchbox", "checkbox", "radio", "switch", "tab", "option", "menuitem",
    "menuitemcheckbox", "menuitemradio", "combobox", "listbox", "slider", "spinbutton", "treeitem",
    "DisclosureTriangle", "MenuListOption", "ListBoxOption", "ColorWell", "Date", "DateTime", "InputTime",
    "PopUpButton", "ToggleButton",
})
#: roles marked only with a name: what one reads on a screen to find one's way
NAMED_ROLES = frozenset({"heading", "image", "img", "figure", "dialog", "alertdialog"})
#: roles that never make a mark of their own, even when the DOM node takes clicks (the page itself)
_NEVER = frozenset({"RootWebArea", "WebArea", "InlineTextBox", "LineBreak", "StaticText", "Canvas", "none",
                    "presentation", "Iframe", "IframePresentational"})
#: a mark that is there only because its node takes clicks and that covers more of the screen than
#: this is a page-wide handler (MiniWoB's task area, a delegated listener on a container), not a target
_MAX_CLICKABLE_AREA = 0.5
_MAX_NAME = 200


def _norm_name(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_NAME else text[:_MAX_NAME - 1] + "…"


def _ax_value(node: dict, key: str) -> str:
    v = node.get(key) or {}
    value = v.get("value") if isinstance(v, dict) else None
    return value if isinstance(value, str) else ""


def _ax_states(node: dict) -> tuple[str, ...]:
    """The :data:`~guiagent.types.MARK_STATES` a CDP AX node's ``properties`` say hold: ``checked`` /
    ``mixed`` (its tristate ``checked``; ``pressed`` for a toggle button), ``selected``, ``expanded`` /
    ``collapsed`` (its ``expanded``, present only on elements that open and close), ``disabled``. A value
    of another type or shape is ignored, and so is a second ``checked`` / ``mixed`` (a node reporting both
    ``checked`` and ``pressed``: the first one read stands, so that no page can give a mark two at once)."""
    out: list[str] = []
    for prop in node.get("properties") or ():
        if not isinstance(prop, dict):
            continue
        value = prop.get("value")
        value = value.get("value") if isinstance(value, dict) else None
        key = prop.get("name")
        if key in ("checked", "pressed"):
            if "checked" in out or "mixed" in out:
                continue
            if value in (True, "true"):
                out.append("checked")
            elif value == "mixed":
                out.append("mixed")
        elif key == "selected" and value in (True, "true"):
            out.append("selected")
        elif key == "expanded" and isinstance(value, bool):
            out.append("expanded" if value else "collapsed")
        elif key == "disabled" and value in (True, "true"):
            out.append("disabled")
    return tuple(out)


def build_marks(ax_nodes: Sequence[dict], snapshot: dict, viewport: tuple[int, int],
                node_ids: "dict[int, int] | None" = None) -> "tuple[Any, ...]":
    """The page's marks from CDP's full AX tree (its ``nodes``) and a DOM snapshot, numbered in
    document order from 0, boxes normalised to the ``viewport`` (CSS pixels) and clipped to it.

    Each mark carries the states its AX node reports (:func:`_ax_states`: checked, selected, expanded...).
    Marked: each node Chromium exposes (not ``ignored``) whose box meets the viewport and that
    has an interactive role (:data:`INTERACTIVE_ROLES`), or a readable one with a name
    (:data:`NAMED_ROLES`), or whose DOM node responds to clicks. A node marked only because it takes
    clicks is dropped when it holds another mark (a row around its checkbox: the checkbox is the
    target) or covers over half the screen; it is named after its text when it has no name. An
    interactive node inside another of the same name and nearly the same box (a tab's link inside
    the tab) is the same target and is not marked twice. Only the main frame's nodes are marked.

    ``node_ids``: filled with each mark's DOM node (mark id -> CDP ``backendNodeId``), where the device looks
    for a point of the element that nothing covers (:meth:`BrowserDevice.execute`).
    """
    vw, vh = viewport
    docs = snapshot.get("documents") or []
    if not ax_nodes or not docs:
        return ()
    doc = docs[0]
    nodes, layout = doc["nodes"], doc["layout"]
    backend = nodes.get("backendNodeId") or []
    sx, sy = float(doc.get("scrollOffsetX", 0.0)), float(doc.get("scrollOffsetY", 0.0))
    rects: dict[int, tuple[float, float, float, float]] = {}
    for j, ni in enumerate(layout.get("nodeIndex") or []):
        bid = backend[ni]
        if bid not in rects:  # the first layout object of a node is its box (later ones: text fragments)
            x, y, w, h = layout["bounds"][j]
            rects[bid] = (x - sx, y - sy, x - sx + w, y - sy + h)
    clickable = {backend[i] for i in ((nodes.get("isClickable") or {}).get("index") or [])}

    by_id = {n.get("nodeId"): n for n in ax_nodes}
    root = ax_nodes[0]
    # candidates in document order: (ax node, role, name, box, why, parent candidate index)
    cands: list[list[Any]] = []
    children_of: dict[int, list[int]] = {}

    def box_of(bid: Any) -> tuple[float, float, float, float] | None:
        r = rects.get(bid)
        if r is None:
            return None
        x0, y0 = max(0.0, r[0] / vw), max(0.0, r[1] / vh)
        x1, y1 = min(1.0, r[2] / vw), min(1.0, r[3] / vh)
        if x1 - x0 <= 1e-6 or y1 - y0 <= 1e-6:
            return None  # off-screen or empty
        return (round(x0, 5), round(y0, 5), round(x1, 5), round(y1, 5))

    def text_of(node: dict, depth: int = 0) -> str:
        """The text under an unnamed node (its StaticText descendants)."""
        if depth > 50:
            return ""
        out = []
        for cid in node.get("childIds") or ():
            c = by_id.get(cid)
            if c is None or c.get("ignored"):
                continue
            role = _ax_value(c, "role")
            if role == "StaticText":
                out.append(_ax_value(c, "name"))
            elif role != "InlineTextBox":
                out.append(text_of(c, depth + 1))
        return " ".join(t for t in out if t)

    stack: list[tuple[dict, int]] = [(root, -1)]
    seen: set[Any] = set()
    while stack:
        node, parent = stack.pop()
        nid = node.get("nodeId")
        if nid in seen:  # a malformed tree with a cycle: each node once
            continue
        seen.add(nid)
        here = parent
        if not node.get("ignored"):
            role, name = _ax_value(node, "role"), _norm_name(_ax_value(node, "name"))
            bid = node.get("backendDOMNodeId")
            why = None
            if role in INTERACTIVE_ROLES:
                why = "role"
            elif role in NAMED_ROLES and name:
                why = "named"
            elif bid in clickable and role not in _NEVER:
                why = "clicks"
            box = box_of(bid) if why else None
            if box is not None:
                cands.append([node, role, name, box, why, parent])
                here = len(cands) - 1
                if parent >= 0:
                    children_of.setdefault(parent, []).append(here)
        for cid in reversed(node.get("childIds") or ()):
            c = by_id.get(cid)
            if c is not None:
                stack.append((c, here))

    def inside(i: int) -> bool:
        """Whether candidate ``i`` has a marked candidate anywhere below it."""
        return bool(children_of.get(i))

    keep: list[bool] = [True] * len(cands)
    for i, (node, role, name, box, why, parent) in enumerate(cands):
        if why == "clicks":
            area = (box[2] - box[0]) * (box[3] - box[1])
            if inside(i) or area > _MAX_CLICKABLE_AREA:
                keep[i] = False
                continue
            if not name:
                cands[i][2] = _norm_name(text_of(node))
        if why == "role" and parent >= 0 and keep[parent] and cands[parent][4] == "role" \
                and cands[parent][2] == name and _iou(cands[parent][3], box) > 0.6:
            keep[i] = False  # the same target as the mark around it
        if why == "named" and parent >= 0 and keep[parent] and cands[parent][4] != "named":
            keep[i] = False  # an icon or label inside a control: part of that control's mark
    marks = []
    for (node, role, name, box, why, parent), k in zip(cands, keep):
        if k:
            if node_ids is not None and isinstance(node.get("backendDOMNodeId"), int):
                node_ids[len(marks)] = node["backendDOMNodeId"]
            marks.append(Mark(len(marks), role if why != "clicks" or role not in ("generic", "") else "clickable",
                              name, box, _ax_states(node)))
    return tuple(marks)


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
