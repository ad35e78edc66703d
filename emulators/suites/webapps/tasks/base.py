"""Base class of the webapps tasks and the oracle's screen helpers.

A :class:`WebTask` samples a world seed plus its own choices, loads the world
(edited by :meth:`WebTask.prepare`) into a fresh server session, points the
device at that session's launcher and evaluates from the session state the
server keeps. Subclasses implement ``choose`` (params from a world and the rng),
``success`` (state, answer -> bool), ``progress`` (ordered milestone flags) and
``oracle``.

The oracle helpers read the page the way a scripted solver may (DOM, url) and
return the same actions an agent would send: a :class:`Click` at an element's
centre, :class:`Scroll` while the element is off-screen, :class:`Type` into the
focused field, :class:`Answer`, :class:`Finish`.
"""

from __future__ import annotations

import random
import re
import uuid
import weakref
from typing import Any, ClassVar, Sequence
from urllib.parse import parse_qs, urlsplit

from emulators.base import ActionError, Device, Task
from guiagent.types import Action, Click, Key, NavigateHome, Scroll, Type

from ..world import APP_TITLES, APPS, make_world, shuffled_layout

__all__ = ["WebTask", "Route", "app_step", "norm", "digits", "parse_cents", "parse_count", "same_time",
           "visited", "last_view", "resolve_app", "split_rel", "session_id"]

#: one hop of a route: (page path relative to the session, selector to click on the page before)
Route = Sequence[tuple[str, str | None]]

_TARGET_JS = """(sel) => {
  const els = Array.from(document.querySelectorAll(sel)).filter((e) => {
    const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  if (!els.length) return null;
  const e = els[0], r = e.getBoundingClientRect(), vw = innerWidth, vh = innerHeight;
  let top = 0, bottom = vh;
  if (!e.closest('header.top, dialog, .composer, .fab')) {
    const h = document.querySelector('header.top');
    if (h) top = h.getBoundingClientRect().bottom;
    for (const b of document.querySelectorAll('.composer, .snackbar')) bottom = Math.min(bottom, b.getBoundingClientRect().top);
  }
  const cx = r.left + r.width / 2, cy = r.top + Math.min(r.height, 48) / 2;
  if (cy < top + 4) return {scroll: 'up'};
  if (cy > bottom - 4) return {scroll: 'down'};
  const hit = document.elementFromPoint(cx, cy);
  if (hit && !e.contains(hit) && !hit.contains(e)) return {scroll: cy > vh / 2 ? 'down' : 'up'};
  const a = document.activeElement;
  return {x: cx / vw, y: cy / vh, value: ('value' in e) ? e.value : null, focused: a === e,
          all: a === e && 'selectionStart' in e && e.selectionStart === 0 && e.selectionEnd === e.value.length};
}"""

#: the apps' own way to show another session's page in the open document (static/app.js)
_VISIT_HOOK = "(url) => window.webapps ? window.webapps.visit(url) : false"

_PAGE_JS = """() => ({dialog: (document.querySelector('dialog[open]') || {}).id || null,
                      pending: (window.__pending || 0), up: !!document.querySelector('a.up')})"""


def norm(text: str | None) -> str:
    """Lower case, no surrounding quotes/punctuation, single spaces."""
    t = re.sub(r"\s+", " ", (text or "").strip().lower())
    return t.strip(" \"'“”‘’.!?,;:")


def digits(text: str | None) -> str:
    return re.sub(r"\D", "", text or "")


def parse_cents(text: str | None) -> int | None:
    """``"$1,234.5"`` -> ``123450``; the first amount in the text, ``None`` if there is none."""
    m = re.search(r"(\d[\d,]*)(?:\.(\d{1,2}))?", (text or "").replace(" ", ""))
    if not m:
        return None
    return int(m.group(1).replace(",", "")) * 100 + int((m.group(2) or "0").ljust(2, "0"))


_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                     "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}


def parse_count(text: str | None) -> int | None:
    t = norm(text)
    m = re.search(r"\d+", t)
    if m:
        return int(m.group())
    for word in t.split():
        if word in _WORDS:
            return _WORDS[word]
    return None


def same_time(text: str | None, hhmm: str) -> bool:
    """Whether ``text`` names the clock time ``hhmm`` (``7:30``, ``07:30``, ``7:30 PM`` for 19:30)."""
    m = re.search(r"(\d{1,2})[:.h](\d{2})\s*([ap]\.?m\.?)?", (text or "").lower())
    if not m:
        return False
    h, mi = int(m.group(1)), int(m.group(2))
    if m.group(3):
        h = h % 12 + (12 if m.group(3).startswith("p") else 0)
    return f"{h:02d}:{mi:02d}" == hhmm


def split_rel(rel: str) -> tuple[str, dict[str, list[str]]]:
    path, _, query = rel.partition("?")
    return path.strip("/"), parse_qs(query)


def visited(state: dict[str, Any], prefix: str) -> bool:
    """Whether any page at or under ``prefix`` (e.g. ``contacts``) was viewed this episode."""
    return any(_under(entry, prefix) for entry in state["log"])


def _under(entry: str, prefix: str) -> bool:
    path, query = split_rel(entry)
    want_path, want_query = split_rel(prefix)
    if not (path == want_path or (want_path and path.startswith(want_path + "/")) or not want_path):
        return False
    return all(query.get(k) == v for k, v in want_query.items())


def last_view(state: dict[str, Any]) -> str | None:
    return state["log"][-1] if state["log"] else None


def resolve_app(name: str) -> str:
    """App slug for a name like ``"Contacts"``, ``"contacts app"``; :class:`ActionError` if unknown."""
    key = norm(name).removesuffix(" app").strip()
    for slug in APPS:
        if key in (slug, APP_TITLES[slug].lower()):
            return slug
    raise ActionError(f"unknown app {name!r}; apps: {', '.join(APP_TITLES[s] for s in APPS)}")


_DEVICE_TOKENS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def session_id(device: Any, world_seed: int) -> str:
    """``<device token><world seed>``: one session per device at a time, the same id for the same seed.

    The token is drawn once per device object, so concurrent episodes on different
    devices (a GRPO group runs one seed on several) never collide, while a seeded
    reset repeated on one device gives identical urls (Gymnasium's determinism checks
    compare observations, urls included).
    """
    token = _DEVICE_TOKENS.get(device)
    if token is None:
        token = _DEVICE_TOKENS.setdefault(device, uuid.uuid4().hex[:8])
    return f"{token}{world_seed:08x}"


def app_step(slug: str) -> tuple[str, str]:
    return (slug, f'a.app-icon[data-app="{slug}"]')


class WebTask(Task):
    """A task of the webapps suite; see the module docstring."""

    suite: ClassVar[str] = "webapps"
    #: page (relative to the session) where the episode starts; "" is the launcher
    start: ClassVar[str] = ""
    #: lists of the screens (``world.LAYOUT_LISTS`` names) each episode reorders, drawn from its seed and
    #: kept in its parameters (``params["layout"]``); empty: the fixed layout
    shuffle: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: dict[str, Any]):
        super().__init__(params)
        self.sid: str | None = None
        self._client = None
        self._reset_on: Device | None = None

    # --- sampling and set-up -----------------------------------------------------------------

    @classmethod
    def sample_params(cls, rng: random.Random) -> dict[str, Any]:
        seed = rng.randrange(2**31)
        params = {"seed": seed, **cls.choose(make_world(seed), rng)}
        if cls.shuffle:
            params["layout"] = shuffled_layout(rng, cls.shuffle)
        return params

    @classmethod
    def choose(cls, world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """Task parameters drawn from ``world`` and ``rng`` (JSON-serialisable)."""
        return {}

    def prepare(self, world: dict[str, Any]) -> None:
        """Edit the freshly made world in place into the task's start state."""

    def initial_state(self) -> dict[str, Any]:
        world = make_world(int(self.params["seed"]))
        self.prepare(world)
        if self.params.get("layout"):
            world["layout"] = {k: list(v) for k, v in dict(self.params["layout"]).items()}
        return world

    def start_page(self) -> str:
        return self.start

    def reset_device(self, device: Device) -> None:
        """Create this episode's server session and show its start page: one page view.

        The session id is fixed by the device and the world seed (see :func:`session_id`),
        so the same seed on the same device gives the same urls, and two devices never
        share a session. When the device shows an app page already, the apps render the start
        page in that document (``BrowserDevice.reset_in_page`` with ``window.webapps.visit``):
        no page load, ~3x less CPU than one. Otherwise (a fresh device, another page, a page
        still busy) the device's reset loads ``home_url``; pointing it at the start page for
        that one load (and at the session's launcher afterwards, for ``NavigateHome``) makes
        the start page the first and only page of the history. Either way the next screen is
        the same.
        """
        if not hasattr(device, "goto") or not hasattr(device, "home_url"):
            raise TypeError(f"webapps tasks need a BrowserDevice, got {type(device).__name__}")
        from ..server import shared_server  # lazy: Flask and httpx (0.3 s) load on first use
        server, client = shared_server()
        if self.sid is not None:
            client.delete(self.sid)
        if getattr(device, "allowed_origins", None) is not None and not any(
                server.url.startswith(o) for o in device.allowed_origins):  # type: ignore[attr-defined]
            raise ValueError(f"the device may not load the app server {server.url}; allow that origin "
                             "(the suite's make_device does) or leave allowed_origins empty")
        self._client = client
        self.sid = session_id(device, int(self.params["seed"]))
        state = self.initial_state()
        client.reset(self.sid, state)
        home = server.session_url(self.sid)
        device.open_app_handler = lambda name: device.goto(home + resolve_app(name))  # type: ignore[attr-defined]
        start = home + self.start_page()
        in_page = getattr(device, "reset_in_page", None)
        if in_page is None or not in_page(start, _VISIT_HOOK):
            if in_page is not None:  # the attempt may have shown a page: its view is in the log
                client.reset(self.sid, state)
            device.home_url = start  # type: ignore[attr-defined]
            try:
                device.reset()
            finally:
                device.home_url = home  # type: ignore[attr-defined]
        device.home_url = home  # type: ignore[attr-defined]
        self._reset_on = device

    def setup(self, device: Device) -> str:
        """The start state is made by :meth:`reset_device`; called on its own, ``setup`` does that too."""
        if self._reset_on is not device:
            self.reset_device(device)
        self._reset_on = None
        return self.goal

    def teardown(self, device: Device) -> None:
        if hasattr(device, "home_url") and self._client is not None:
            # the next reset's first page load should not hit the deleted session
            device.home_url = self._client.base_url + "/"  # type: ignore[attr-defined]
        if self.sid is not None and self._client is not None:
            try:
                self._client.delete(self.sid)
            except Exception:  # the server may already be stopped; the session dies with it
                pass
        self.sid = None

    # --- evaluation ------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        if self.sid is None or self._client is None:
            raise RuntimeError("setup() first")
        return self._client.state(self.sid)

    def success(self, state: dict[str, Any], answer: str | None) -> bool:
        raise NotImplementedError

    def progress(self, state: dict[str, Any]) -> list[bool]:
        """Ordered milestone flags from the state (each stays true once reached)."""
        return []

    def evaluate(self, device: Device, answer: str | None = None) -> float:
        return 1.0 if self.success(self.state(), answer) else 0.0

    def milestones(self, device: Device) -> list[bool]:
        return [bool(x) for x in self.progress(self.state())]

    # --- oracle helpers --------------------------------------------------------------------------

    def rel(self, device: Device) -> str:
        """Current page relative to the session (``contacts/3?tab=x``); a marker string outside it."""
        url = device.page.url  # type: ignore[attr-defined]
        marker = f"/s/{self.sid}/"
        parts = urlsplit(url)
        if marker not in parts.path:
            return "\0outside"
        rel = parts.path.split(marker, 1)[1]
        return rel + (f"?{parts.query}" if parts.query else "")

    def at(self, device: Device, target: str) -> bool:
        cur_path, cur_q = split_rel(self.rel(device))
        path, query = split_rel(target)
        return cur_path == path and all(cur_q.get(k) == v for k, v in query.items())

    def page_info(self, device: Device) -> dict[str, Any]:
        return device.evaluate(_PAGE_JS)  # type: ignore[attr-defined]

    def click(self, device: Device, selector: str) -> Action | None:
        """Tap the element (scrolling towards it first); ``None`` if it is not on the page."""
        t = device.evaluate(_TARGET_JS, selector)  # type: ignore[attr-defined]
        if t is None:
            return None
        if "scroll" in t:
            return Scroll(t["scroll"], amount=0.4)
        return Click(round(t["x"], 4), round(t["y"], 4))

    def fill(self, device: Device, selector: str, value: str) -> Action | None:
        """The next action to make the field hold ``value``; ``None`` when it already does."""
        t = device.evaluate(_TARGET_JS, selector)  # type: ignore[attr-defined]
        if t is None:
            raise RuntimeError(f"oracle: no field {selector!r} on {self.rel(device)}")
        if "scroll" in t:
            return Scroll(t["scroll"], amount=0.4)
        if t["value"] == value:
            return None
        if not t["focused"]:
            return Click(round(t["x"], 4), round(t["y"], 4))
        if t["value"] and not t["all"]:
            return Key("Control+a")
        return Type(value)

    def form(self, device: Device, fields: Sequence[tuple[str, str]], submit: str) -> Action | None:
        for selector, value in fields:
            action = self.fill(device, selector, value)
            if action is not None:
                return action
        return self.click(device, submit)

    def navigate(self, device: Device, route: Route) -> Action | None:
        """Next action along ``route`` (launcher first); ``None`` once at its last page.

        From a page off the route it goes up (the app bar's arrow) until it meets it.
        """
        info = self.page_info(device)
        for i in range(len(route) - 1, -1, -1):
            if self.at(device, route[i][0]):
                if i == len(route) - 1:
                    return None
                if info["dialog"]:
                    return self.dismiss(device, info["dialog"])
                return self.click(device, route[i + 1][1] or "")
        if info["dialog"]:
            return self.dismiss(device, info["dialog"])
        if info["up"]:
            return self.click(device, "a.up")
        return NavigateHome()

    def dismiss(self, device: Device, dialog_id: str) -> Action:
        act = self.click(device, f"#{dialog_id} [data-close]")
        return act if act is not None else Key("Escape")

    def delete_confirmed(self, device: Device, page: str, route: Route) -> Action | None:
        """Oracle step of "open the item's page, press Delete, confirm the dialog"."""
        if self.at(device, page):
            if self.page_info(device)["dialog"] == "confirm-delete":
                return self.click(device, "#confirm-delete button.confirm")
            return self.click(device, "#delete")
        return self.navigate(device, route)

    def route_to(self, *hops: tuple[str, str | None]) -> list[tuple[str, str | None]]:
        return [("", None), *hops]
