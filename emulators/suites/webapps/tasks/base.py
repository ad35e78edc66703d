"""The webapps task as data: :class:`Family` rows, the one :class:`WebTask` class that runs them,
and the oracle's screen helpers.

A task is one :class:`Family` row in its app's table (``FAMILIES`` of ``contacts.py``,
``calendar.py``...): its id, goal template, difficulty and step budget, ``choose`` (the episode's
parameters from the seeded world), ``prepare`` (the world edited into the start state),
``success`` and ``milestones`` (read from the session state the server keeps), and ``route`` and
``oracle`` (how a scripted solver gets it done). Pages, selectors and values in a row are
templates of the parameters (``"contacts/{cid}"``). :func:`task_class` makes the row a
:class:`WebTask` subclass (the Gymnasium registry and :class:`~emulators.base.GuiEnv` take task
classes) that holds the row and nothing else: every task is ``Task <- WebTask <- <its class>``.

A :class:`WebTask` samples a world seed plus the row's choices, loads the world (as ``prepare``
edits it) into a fresh server session, points the device at that session's start page and
evaluates from the session state. It is a ``Task[BrowserDevice]``: its methods get the
:class:`~emulators.browser.BrowserDevice` typed, and :meth:`WebTask.reset_device` refuses any
other device.

Oracles are composed from a few moves: :func:`walk` (follow the route, then a move),
:func:`change` (``Finish`` once the state is right, else walk the route, then a move), and the
moves :data:`FINISH`, :func:`answer`, :func:`click`, :func:`fill`, :func:`confirm`, :data:`DELETE`.
The screen helpers read the page the way a scripted solver may (DOM, url) and return the same
actions an agent would send: a :class:`Click` at an element's centre, :class:`Scroll` while the
element is off-screen, :class:`Type` into the focused field, :class:`Answer`, :class:`Finish`.
"""

from __future__ import annotations

import random
import re
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast
from urllib.parse import parse_qs, urlsplit

from emulators.base import ActionError, Task
from emulators.names import made_up_name
from guiagent.types import Action, Answer, Click, Finish, Key, NavigateHome, Scroll, Type

from ..world import (
    APP_TITLES,
    APPS,
    HELD_OUT_TARGETS,
    make_world,
    phone_names,
    shuffled_layout,
    target_name,
)

if TYPE_CHECKING:
    from emulators.browser import BrowserDevice

__all__ = ["WebTask", "Family", "Route", "Move", "task_class", "tasks_of", "route_to", "pick", "fmt", "done",
           "walk", "change", "FINISH", "answer", "click", "fill", "confirm", "DELETE", "new_item",
           "app_step", "last_is", "norm", "digits", "parse_cents", "parse_count", "same_time", "visited",
           "last_view", "resolve_app", "split_rel", "session_id"]

#: one hop of a route: (page path relative to the session, selector to click on the page before)
Route = Sequence[tuple[str, str | None]]
#: an episode's parameters (what ``choose`` drew)
Params = Mapping[str, Any]
#: a world or a session's state (``world.make_world`` and the server's session, same shape)
State = dict[str, Any]
#: one step of a scripted solver: the next action from the task and the device (``None``: nothing to do here)
Move = Callable[["WebTask", "BrowserDevice"], Action | None]
#: a milestone: a page (reached once any page at or under it was viewed) or a check of the state
Milestone = str | Callable[["WebTask", State], bool]

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


_DEVICE_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


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


def route_to(*hops: tuple[str, str | None]) -> list[tuple[str, str | None]]:
    """A route from the launcher: ``route_to(app_step("notes"), ("notes/new", "#fab"))``."""
    return [("", None), *hops]


def last_is(state: State, target: str) -> bool:
    """Whether the page showing now (the last one viewed) is ``target`` (query keys must match)."""
    last = last_view(state)
    if last is None:
        return False
    path, query = split_rel(last)
    want_path, want_query = split_rel(target)
    return path == want_path and all(query.get(k) == v for k, v in want_query.items())


def fmt(template: str, p: Params) -> str:
    """``template`` with its ``{param}`` fields filled from the parameters ``p``."""
    return template.format_map(p)


def pick(collection: str, **fields: str) -> Callable[[State, random.Random], dict[str, Any]]:
    """A ``choose``: one item of ``world[collection]`` drawn by the rng, its ``fields`` (parameter
    name = item key) as the parameters: ``pick("contacts", cid="id", name="name")``."""
    def choose(world: State, rng: random.Random) -> dict[str, Any]:
        item = rng.choice(world[collection])
        return {name: item[key] for name, key in fields.items()}
    return choose


# --- the row -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One webapps task: a row of its app's table (see the module docstring).

    Strings in ``start``, ``route``, ``milestones`` and the oracle's moves are templates of the
    episode's parameters (``"contacts/{cid}"``); where a template cannot say it, a field takes a
    function of the parameters ``p``. ``success`` and the milestones' checks get the running task
    ``t`` (its ``params`` and ``initial_state()``), the oracle's moves the task and the device.
    """

    task_id: str
    #: goal text with ``{param}`` fields
    template: str
    #: ``easy``, ``medium`` or ``hard``
    difficulty: str
    max_steps: int
    #: the parameters of one episode from the seed's world and the rng (JSON values), drawn in a fixed order
    choose: Callable[[State, random.Random], dict[str, Any]]
    #: whether the session state (and the agent's answer) completes the task
    success: Callable[[WebTask, State, str | None], bool]
    #: the sub-goals in order: pages to have viewed (at or under), :func:`done`, or checks of the state
    milestones: Sequence[Milestone] | Callable[[Params], Sequence[Milestone]]
    #: the oracle (:func:`walk`, :func:`change` or a move of its own)
    oracle: Move
    #: the hops after the launcher (page, selector to tap on the page before) to the page where the
    #: oracle's last moves happen
    route: Route | Callable[[Params], Route] = ()
    #: edits the freshly made world in place into the start state
    prepare: Callable[[Params, State], None] | None = None
    #: the page (relative to the session) where the episode starts; "" is the launcher
    start: str = ""
    #: lists of the screens (``world.LAYOUT_LISTS`` names) each episode reorders; empty: the fixed layout
    shuffle: tuple[str, ...] = ()
    #: the parameters that name the episode's targets, and the kind of each (``{"app": "app"}``): an
    #: episode whose target is one of ``world.HELD_OUT_TARGETS`` of its kind is an unseen-target episode
    #: (:meth:`WebTask.target_split`); empty: the task holds no target out
    targets: Mapping[str, str] = field(default_factory=dict)
    #: the task class's docstring ("": one made from the template)
    doc: str = ""


def task_class(family: Family, module: str) -> type[WebTask]:
    """The :class:`WebTask` subclass that runs ``family``, named after its id (``contacts_add`` ->
    ``ContactsAdd``) and placed in ``module`` (bind it there under that name)."""
    name = "".join(part.capitalize() for part in family.task_id.split("_"))
    attrs: dict[str, Any] = {
        "family": family, "task_id": family.task_id, "template": family.template,
        "difficulty": family.difficulty, "max_steps": family.max_steps, "shuffle": family.shuffle,
        "start": family.start, "__module__": module, "__qualname__": name,
        "__doc__": family.doc or f"webapps task ``{family.task_id}``: {family.template}"}
    return cast("type[WebTask]", type(name, (WebTask,), attrs))


def tasks_of(families: Sequence[Family], module: str) -> list[type[WebTask]]:
    """The task classes of an app's table, in its order (a module's ``TASKS``)."""
    return [task_class(f, module) for f in families]


# --- milestones and oracles, composed in the tables ----------------------------------------------------


def done(t: WebTask, state: State) -> bool:
    """The milestone "the task is complete" (its ``success`` with no answer)."""
    return bool(t.success(state, None))


def walk(move: Move) -> Move:
    """Oracle: follow the row's route (going up from pages off it), then ``move`` on its last page."""
    def oracle(t: WebTask, device: BrowserDevice) -> Action | None:
        return t.navigate(device, t.route()) or move(t, device)
    return oracle


def change(move: Move, *, look_first: Route = ()) -> Move:
    """Oracle of a task that changes the state: ``Finish`` once it is right, else (after following
    the hops ``look_first`` to their last page, if that page was not viewed yet) :func:`walk` the
    route, then ``move``."""
    def oracle(t: WebTask, device: BrowserDevice) -> Action | None:
        state = t.state()
        if t.success(state, None):
            return Finish()
        if look_first:
            first = t.route(look_first)
            if not visited(state, first[-1][0]):
                return t.navigate(device, first)
        return t.navigate(device, t.route()) or move(t, device)
    return oracle


def FINISH(t: WebTask, device: BrowserDevice) -> Action | None:
    """Move: end the episode."""
    return Finish()


def answer(text: str) -> Move:
    """Move: answer ``text`` (a template: ``answer("{count}")``)."""
    return lambda t, device: Answer(fmt(text, t.params))


def click(selector: str) -> Move:
    """Move: tap the element (a template), scrolling towards it first."""
    return lambda t, device: t.click(device, fmt(selector, t.params))


def fill(fields: Mapping[str, str], submit: str) -> Move:
    """Move: make each field (selector) hold its value (a template), in order, then tap ``submit``."""
    return lambda t, device: t.form(device, [(sel, fmt(v, t.params)) for sel, v in fields.items()], submit)


def confirm(dialog: str, opener: str) -> Move:
    """Move: tap ``opener``, then the confirm button of the dialog (id ``dialog``) it opens."""
    def move(t: WebTask, device: BrowserDevice) -> Action | None:
        if t.page_info(device)["dialog"] == dialog:
            return t.click(device, f"#{dialog} button.confirm")
        return t.click(device, opener)
    return move


#: Move: delete the item whose page shows (Delete, then confirm)
DELETE = confirm("confirm-delete", "#delete")


def new_item(app: str, form: str, move: Move) -> dict[str, Any]:
    """The ``milestones``, ``route`` and ``oracle`` of a row that makes a new item: the app, its
    floating action button, then ``move`` on the form (usually :func:`fill`) until the state is right."""
    return {"milestones": (app, form, done), "route": (app_step(app), (form, "#fab")), "oracle": change(move)}


# --- the task class ------------------------------------------------------------------------------------


class WebTask(Task["BrowserDevice"]):
    """A task of the webapps suite, running the :class:`Family` row ``family``; see the module docstring."""

    suite: ClassVar[str] = "webapps"
    #: page (relative to the session) where the episode starts; "" is the launcher
    start: ClassVar[str] = ""
    #: lists of the screens (``world.LAYOUT_LISTS`` names) each episode reorders, drawn from its seed and
    #: kept in its parameters (``params["layout"]``); empty: the fixed layout
    shuffle: ClassVar[tuple[str, ...]] = ()
    #: the row this class runs (:func:`task_class` sets it)
    family: ClassVar[Family]

    def __init__(self, params: Mapping[str, Any]):
        super().__init__(params)
        self.sid: str | None = None
        self._client: Any = None
        self._reset_on: BrowserDevice | None = None
        self._checked: tuple[tuple[str, int], State] | None = None  # (session, version) -> its state

    # --- sampling and set-up -----------------------------------------------------------------

    @classmethod
    def sample_params(cls, rng: random.Random) -> dict[str, Any]:
        seed = rng.randrange(2**31)
        params = {"seed": seed, **cls.choose(make_world(seed), rng)}
        if cls.shuffle:
            params["layout"] = shuffled_layout(rng, cls.shuffle)
        return params

    @classmethod
    def has_held_out_targets(cls) -> bool:
        return bool(cls.family.targets)

    @classmethod
    def target_split(cls, params: Mapping[str, Any]) -> str | None:
        """``unseen`` when a parameter :attr:`Family.targets` names holds a held-out target of its kind
        (``world.HELD_OUT_TARGETS``), ``seen`` when none does, ``None`` for a task without targets."""
        if not cls.family.targets:
            return None
        held = any(str(params.get(key)) in HELD_OUT_TARGETS.get(kind, ()) for key, kind in cls.family.targets.items())
        return "unseen" if held else "seen"

    @classmethod
    def rename_targets(cls, params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """``params`` with ``labels``: each target a :attr:`Family.targets` parameter names shown under a
        made-up name of its shape, on every screen (the world's ``labels``) and in the goal; never a name
        of the phone, held out or not. The state, the oracle and the success check still read the real
        target (the screens' keys and addresses do not change)."""
        if not cls.family.targets:
            return params
        labels: dict[str, str] = {}
        for key, kind in cls.family.targets.items():
            old = target_name(kind, params[key])
            labels[old] = made_up_name(rng, old, phone_names() | frozenset(labels.values()))
        return {**params, "labels": labels}

    @property
    def goal(self) -> str:
        """The template filled in, each renamed target (``params["labels"]``) under its shown name."""
        labels = self.params.get("labels") or {}
        return self.template.format(**{k: labels.get(v, v) if isinstance(v, str) else v
                                       for k, v in self.params.items()})

    @classmethod
    def choose(cls, world: State, rng: random.Random) -> dict[str, Any]:
        """Task parameters drawn from ``world`` and ``rng`` (JSON-serialisable)."""
        return cls.family.choose(world, rng)

    def prepare(self, world: State) -> None:
        """Edit the freshly made world in place into the task's start state."""
        if self.family.prepare is not None:
            self.family.prepare(self.params, world)

    def initial_state(self) -> State:
        world = make_world(int(self.params["seed"]))
        self.prepare(world)
        if self.params.get("layout"):
            world["layout"] = {k: list(v) for k, v in dict(self.params["layout"]).items()}
        if self.params.get("labels"):
            world["labels"] = {str(k): str(v) for k, v in dict(self.params["labels"]).items()}
        return world

    def start_page(self) -> str:
        return fmt(self.start, self.params)

    def route(self, hops: Route | Callable[[Params], Route] | None = None) -> Route:
        """The taps from the launcher along ``hops`` (default: the row's route) with this episode's
        parameters filled in: to the page where the oracle's last moves happen."""
        hops = self.family.route if hops is None else hops
        if callable(hops):
            return route_to(*hops(self.params))
        return route_to(*((fmt(page, self.params), None if sel is None else fmt(sel, self.params))
                          for page, sel in hops))

    def reset_device(self, device: BrowserDevice) -> None:
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
        # lazy: the browser device (asyncio); `import emulators` lists the tasks without it
        from emulators.browser import BrowserDevice
        if not isinstance(device, BrowserDevice):
            raise TypeError(f"webapps tasks need a BrowserDevice, got {type(device).__name__}")
        from ..server import shared_server  # lazy: Flask and httpx (0.3 s) load on first use
        server, client = shared_server()
        if self.sid is not None:
            client.delete(self.sid)
        if not any(server.url.startswith(o) for o in device.allowed_origins):
            raise ValueError(f"the device may not load the app server {server.url}; allow that origin "
                             "(the suite's make_device does) or leave allowed_origins empty")
        self._client = client
        self.sid = session_id(device, int(self.params["seed"]))
        self._checked = None  # a new server's versions start again: no copy outlives a (re)made session
        state = self.initial_state()
        client.reset(self.sid, state)
        home = server.session_url(self.sid)
        device.open_app_handler = lambda name: device.goto(home + resolve_app(name))
        start = home + self.start_page()
        if not device.reset_in_page(start, _VISIT_HOOK):
            client.reset(self.sid, state)  # the attempt may have shown a page: its view is in the log
            device.home_url = start
            try:
                device.reset()
            finally:
                device.home_url = home
        device.home_url = home
        self._reset_on = device

    def setup(self, device: BrowserDevice) -> str:
        """The start state is made by :meth:`reset_device`; called on its own, ``setup`` does that too."""
        if self._reset_on is not device:
            self.reset_device(device)
        self._reset_on = None
        return self.goal

    def teardown(self, device: BrowserDevice) -> None:
        if self._client is not None:
            # the next reset's first page load should not hit the deleted session
            device.home_url = self._client.base_url + "/"
        if self.sid is not None and self._client is not None:
            try:
                self._client.delete(self.sid)
            except Exception:  # the server may already be stopped; the session dies with it
                pass
        self.sid = None
        self._checked = None

    # --- evaluation ------------------------------------------------------------------------------

    def state(self) -> State:
        if self.sid is None or self._client is None:
            raise RuntimeError("setup() first")
        return self._client.state(self.sid)

    def success(self, state: State, answer: str | None) -> bool:
        return self.family.success(self, state, answer)

    def progress(self, state: State) -> list[bool]:
        """Ordered milestone flags from the state (each stays true once reached)."""
        marks = self.family.milestones
        return [visited(state, fmt(m, self.params)) if isinstance(m, str) else m(self, state)
                for m in (marks(self.params) if callable(marks) else marks)]

    def _check_state(self) -> State:
        """The state :meth:`evaluate` and :meth:`milestones` read: one copy while the session does not
        change (a step's two checks; a tap that changed nothing on the server), taken afresh as soon
        as it may have (its version moved). Read only: the checks never change a state."""
        version_of = getattr(self._client, "state_version", None)
        if version_of is None or self.sid is None:
            return self.state()
        key = (self.sid, version_of(self.sid))
        if self._checked is not None and self._checked[0] == key:
            return self._checked[1]
        # a change between the version and the copy leaves a newer state under the older version:
        # the next check sees another version and copies again, so no check reads a stale state
        state = self.state()
        self._checked = (key, state)
        return state

    def evaluate(self, device: BrowserDevice, answer: str | None = None) -> float:
        return 1.0 if self.success(self._check_state(), answer) else 0.0

    def milestones(self, device: BrowserDevice) -> list[bool]:
        return [bool(x) for x in self.progress(self._check_state())]

    def oracle(self, device: BrowserDevice) -> Action | None:
        return self.family.oracle(self, device)

    # --- oracle helpers --------------------------------------------------------------------------

    def rel(self, device: BrowserDevice) -> str:
        """Current page relative to the session (``contacts/3?tab=x``); a marker string outside it."""
        url = device.page.url
        marker = f"/s/{self.sid}/"
        parts = urlsplit(url)
        if marker not in parts.path:
            return "\0outside"
        rel = parts.path.split(marker, 1)[1]
        return rel + (f"?{parts.query}" if parts.query else "")

    def at(self, device: BrowserDevice, target: str) -> bool:
        cur_path, cur_q = split_rel(self.rel(device))
        path, query = split_rel(target)
        return cur_path == path and all(cur_q.get(k) == v for k, v in query.items())

    def page_info(self, device: BrowserDevice) -> dict[str, Any]:
        return device.evaluate(_PAGE_JS)

    def click(self, device: BrowserDevice, selector: str) -> Action | None:
        """Tap the element (scrolling towards it first); ``None`` if it is not on the page."""
        t = device.evaluate(_TARGET_JS, selector)
        if t is None:
            return None
        if "scroll" in t:
            return Scroll(t["scroll"], amount=0.4)
        return Click(round(t["x"], 4), round(t["y"], 4))

    def fill(self, device: BrowserDevice, selector: str, value: str) -> Action | None:
        """The next action to make the field hold ``value``; ``None`` when it already does."""
        t = device.evaluate(_TARGET_JS, selector)
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

    def form(self, device: BrowserDevice, fields: Sequence[tuple[str, str]], submit: str) -> Action | None:
        for selector, value in fields:
            action = self.fill(device, selector, value)
            if action is not None:
                return action
        return self.click(device, submit)

    def navigate(self, device: BrowserDevice, route: Route) -> Action | None:
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

    def dismiss(self, device: BrowserDevice, dialog_id: str) -> Action:
        act = self.click(device, f"#{dialog_id} [data-close]")
        return act if act is not None else Key("Escape")

    def delete_confirmed(self, device: BrowserDevice, page: str, route: Route) -> Action | None:
        """Oracle step of "open the item's page, press Delete, confirm the dialog"."""
        if self.at(device, page):
            return DELETE(self, device)
        return self.navigate(device, route)

    def route_to(self, *hops: tuple[str, str | None]) -> list[tuple[str, str | None]]:
        return route_to(*hops)
