"""Snapshots of webapps episodes: the session's server-side state plus the page as it stands.

A webapps episode lives in two places: the app server's session (every app's data, the page views
logged, the pending snackbar message) and the open document (which page, its history, what the
page changed in place, fields typed but not saved, open dialogs, scroll positions, focus). The
first is plain JSON read from the session store; the second is captured by the apps' own script
(``window.webapps.snapshot`` in ``static/app.js``) through :meth:`BrowserDevice.snapshot_page
<emulators.browser.BrowserDevice.snapshot_page>` and put back by ``window.webapps.restore`` in the
open document, with no page load and no request to the server. The restored page is then observed
and must show the captured screen (:func:`task_restore`): a restore never hands back the old screen.

A state restores on any phone device of the suite: the session id (which the device picks) and the
server's origin (one app server a process) in its urls are mapped to the restoring episode's own.
Pages loaded for real (``make_device(page_loads=True)``) keep nothing in the document a restore
could rebuild, so such devices cannot snapshot.

These are :class:`~emulators.suites.webapps.tasks.base.WebTask`'s ``snapshot_support``,
``snapshot`` and ``restore`` (:func:`install` sets them on the class; the task modules hold the
tasks' data only).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emulators.base import Device, EnvState, RestoreMismatch, SnapshotError
from emulators.snapshot import DeviceState
from guiagent.types import Observation

from .tasks.base import resolve_app, session_id

__all__ = ["install", "snapshot_support", "task_snapshot", "task_restore"]

_CAPTURE = "() => (window.webapps && window.webapps.snapshot) ? window.webapps.snapshot() : null"
_RESTORE = ("(data, rewrite) => (window.webapps && window.webapps.restore) "
            "? window.webapps.restore(data, rewrite) : false")


def snapshot_support(cls: type, device: Device) -> str | None:
    """``None`` for a suite device that renders pages in the open document, else why not."""
    config = getattr(device, "config", None)
    if not hasattr(device, "snapshot_page") or config is None:
        return f"webapps episodes snapshot on the suite's browser device, not on {type(device).__name__}"
    if not config.in_page_reset or not config.reuse_context or "__webappsPageLoads" in config.init_script:
        return ("this device loads every page for real (page_loads): the state a page holds goes with its "
                "document, which the browser cannot hand back")
    return None


def task_snapshot(task: Any, device: Device) -> tuple[dict[str, Any], DeviceState]:
    """``({"session", "sid", "origin"}, the page's state)`` of ``task``'s running episode."""
    if task.sid is None or task._client is None:
        raise SnapshotError(f"{task.task_id}: no session to snapshot (reset first)")
    page = device.snapshot_page(_CAPTURE)  # type: ignore[attr-defined]
    session = task._client.state(task.sid)
    return {"session": session, "sid": task.sid, "origin": task._client.base_url}, page


def task_restore(task: Any, device: Device, state: EnvState) -> Observation:
    """Put ``state`` back into a fresh session of ``task`` (this device's) and the page, and observe it.

    On a device whose observations are the capturing device's (the same layout, tree mode, marks, image
    format and browser: ``state_key``) the page must show the captured screen: the same screenshot bytes
    (a capture of an identical render is byte for byte the same) and the same element boxes, both read
    off the page (:meth:`~emulators.browser.BrowserDevice.observe_screen`: the screenshot's cost, no
    tree read; the captured tree, its urls made this session's, goes with the checked screen);
    :class:`~emulators.base.RestoreMismatch` otherwise (a page that renders otherwise than its script
    restores), never the old screen handed back. On another device the page is observed as it is."""
    from .server import StateError, shared_server  # lazy: Flask and httpx (0.3 s) load on first use

    data, page = state.task, state.device
    if (not isinstance(data, dict) or not isinstance(data.get("session"), dict) or not isinstance(data.get("sid"), str)
            or not isinstance(data.get("origin"), str) or page is None):
        raise SnapshotError(f"{task.task_id}: not a webapps state (session, sid, origin and a page)")
    server, client = shared_server()
    task._client = client
    task.sid = session_id(device, int(task.params["seed"]))
    task._checked = None  # the session is made again below: its last copy is not its state
    try:
        client.reset(task.sid, data["session"])
    except StateError as e:
        raise SnapshotError(f"{task.task_id}: the session state does not fit the apps: {e}") from None
    old, new = f"/s/{data['sid']}/", f"/s/{task.sid}/"
    rewrite = [(data["origin"] + old, server.url + new), (old, new)]
    url = str(page.data.get("url") or "")
    for a, b in rewrite:
        if url.startswith(a):
            url = b + url[len(a):]
            break
    else:
        url = server.session_url(task.sid)
    loaded = device.restore_page(page, _RESTORE, url=url, rewrite=rewrite)  # type: ignore[attr-defined]
    if loaded:  # the page loaded on the way logged a view the captured session never saw
        client.reset(task.sid, data["session"])
    home = server.session_url(task.sid)
    device.open_app_handler = lambda name: device.goto(home + resolve_app(name))  # type: ignore[attr-defined]
    device.home_url = home  # type: ignore[attr-defined]
    task._reset_on = None
    if page.data.get("key") != device.state_key():  # observed otherwise (tree, image format, browser)
        return device.observe()
    captured = state.observation
    seen = device.observe_screen()  # type: ignore[attr-defined]
    differ = [what for what, same in (("screenshot", seen.screenshot == captured.screenshot),
                                      ("element boxes", (seen.marks or ()) == (captured.marks or ())))
              if not same]
    if differ:
        raise RestoreMismatch(f"{task.task_id}: the restored page does not show the captured screen "
                              f"({' and '.join(differ)} differ): the page renders otherwise than its "
                              "script restores it")
    # the same render: the captured tree is this page's, its session's urls made this one's
    return replace(seen, tree=captured.tree.replace(old, new) if captured.tree else captured.tree)


def install(web_task: type) -> None:
    """Make these ``web_task``'s snapshot methods (see the module docstring)."""
    web_task.snapshot_support = classmethod(snapshot_support)  # type: ignore[attr-defined]
    web_task.snapshot = task_snapshot  # type: ignore[attr-defined]
    web_task.restore = task_restore  # type: ignore[attr-defined]
