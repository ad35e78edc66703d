"""The webapps app server for real (werkzeug on 127.0.0.1): JSON API, pages, per-session isolation."""

from __future__ import annotations

import threading

import httpx
import pytest

import json
import math

from emulators.suites.webapps.server import (AppClient, AppServer, LocalClient, SessionStore, StateError,
                                             validate_state)
from emulators.suites.webapps.world import APPS, CONTACT_COUNT, copy_json, empty_world, make_world


@pytest.fixture(scope="module")
def server():
    srv = AppServer().start()
    yield srv
    srv.stop()


@pytest.fixture()
def client(server):
    c = AppClient(server.url)
    yield c
    c.close()


def test_world_is_deterministic_and_unique():
    a, b, c = make_world(5), make_world(5), make_world(6)
    assert a == b and a != c
    names = [x["name"] for x in a["contacts"]]
    assert len(set(names)) == len(names) == CONTACT_COUNT
    assert len({e["title"] for e in a["events"]}) == len(a["events"])


def test_make_world_hands_out_independent_copies():
    """make_world keeps each seed's world once built; what it returns is a copy, edits stay there."""
    a = make_world(11)
    a["contacts"][0]["name"] = "Changed"
    a["settings"]["wifi"] = "changed"
    a["notes"].clear()
    b = make_world(11)
    assert b["contacts"][0]["name"] != "Changed" and b["settings"]["wifi"] != "changed" and b["notes"]
    assert b == json.loads(json.dumps(b)), "a world is plain JSON"


@pytest.mark.parametrize("value", [
    make_world(3),
    {"b": [1, 2.5, None, True, "x", (3, [4])], "a": {"z": {}, "y": []}},
    [(), ("a", {"k": (1,)})],
    "text", 7, None,
])
def test_copy_json_is_a_json_round_trip(value):
    for sort_keys in (False, True):
        want = json.loads(json.dumps(value, sort_keys=sort_keys))
        got = copy_json(value, sort_keys=sort_keys)
        assert got == want and json.dumps(got) == json.dumps(want), "same values, same key order"
    if isinstance(value, dict):
        got = copy_json(value)
        assert got is not value and all(got[k] is not value[k] for k in value if isinstance(value[k], (dict, list)))


def test_copy_json_falls_back_to_json_for_what_it_does_not_know():
    assert copy_json({1: "a", "b": [2]}) == {"1": "a", "b": [2]}, "a non-string key as JSON writes it"
    assert math.isnan(copy_json({"x": float("nan")})["x"])
    with pytest.raises(TypeError):
        copy_json({"when": object()})


def test_local_client_copies_both_ways():
    """What a task reads or writes through the in-process client is never the session's live state."""
    srv = AppServer().start()
    try:
        client = LocalClient(srv)
        world = make_world(2)
        sid = client.create(world)
        world["contacts"].clear()
        st = client.state(sid)
        assert st["contacts"], "create kept a copy"
        assert list(st) == sorted(st), "keys sorted, as the HTTP API gives them"
        st["notes"].clear()
        assert client.state(sid)["notes"], "state() hands out a copy"
        assert sid in srv.store and "nope" not in srv.store
    finally:
        srv.stop()


def test_validate_state_fills_defaults_and_rejects_bad_input():
    assert validate_state({})["settings"] == empty_world()["settings"]
    with pytest.raises(StateError, match="unknown state keys"):
        validate_state({"bogus": 1})
    with pytest.raises(StateError, match="must be list"):
        validate_state({"contacts": "x"})
    with pytest.raises(StateError, match="integer 'id'"):
        validate_state({"notes": [{"title": "no id"}]})
    with pytest.raises(StateError, match="plain JSON"):
        validate_state({"notes": [{"id": 1, "when": object()}]})
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(StateError, match="plain JSON"):
        validate_state({"todos": deep})
    as_json = validate_state({"todos": ({"id": 1, "title": "t", "done": False},)})
    assert as_json["todos"] == [{"id": 1, "title": "t", "done": False}], "a tuple is a list, as JSON has it"


def test_api_create_read_reset_delete(server, client):
    sid = client.create(make_world(1))
    assert client.state(sid)["contacts"] == make_world(1)["contacts"]
    client.reset(sid, {"notes": [{"id": 1, "title": "only", "body": ""}]})
    st = client.state(sid)
    assert [n["title"] for n in st["notes"]] == ["only"] and st["contacts"] == []
    with pytest.raises(StateError):
        client.reset(sid, {"contacts": 3})
    assert client.state(sid)["notes"][0]["title"] == "only", "a rejected reset must keep the old state"
    assert client.delete(sid) is True
    with pytest.raises(KeyError):
        client.state(sid)
    r = httpx.get(f"{server.url}/s/{sid}/contacts")
    assert r.status_code == 404 and "unknown session" in r.text
    assert httpx.put(f"{server.url}/api/sessions/x", json=[1]).status_code == 400


def test_every_page_renders_and_is_logged(server, client):
    sid = client.create(make_world(2))
    pages = ["", *APPS, "contacts?tab=fav", "contacts/new", "contacts/1", "contacts/1/edit", "messages/new",
             "messages/1", "calendar/new", "calendar/1", "calendar/1/edit", "notes/new", "notes/1",
             "settings/display", "settings/sound", "settings/storage", "settings/about", "files/Music",
             "files/Documents/1", "expenses?tab=summary", "expenses/new", "expenses/1", "clock?tab=timer",
             "clock/alarms/new", "clock/alarms/1"]
    with httpx.Client(base_url=server.session_url(sid)) as http:
        for page in pages:
            r = http.get(page)
            assert r.status_code == 200, page
            assert "<h1>" in r.text or page == "", page
            assert "http://" not in r.text.replace(server.url, ""), f"{page} links outside the server"
        assert http.get("files/Nope").status_code == 404
        assert http.get("clock?tab=nope").status_code == 404
    assert client.state(sid)["log"] == pages


def test_forms_validate_and_save_server_side(server, client):
    sid = client.create(make_world(3))
    with httpx.Client(base_url=server.session_url(sid)) as http:
        bad = http.post("contacts/new", data={"name": "", "phone": "call me"})
        assert bad.status_code == 422 and set(bad.json()["errors"]) == {"name", "phone"}
        assert len(client.state(sid)["contacts"]) == CONTACT_COUNT
        ok = http.post("contacts/new", data={"name": "Zed Zulu", "phone": "555 1234"}).json()
        assert ok["redirect"].startswith(f"/s/{sid}/contacts/")
        assert http.post("expenses/new", data={"title": "Tea", "amount": "$3.5", "category": "Dining",
                                               "date": "2025-06-01"}).status_code == 200
        assert http.post("settings/set/ringtone", data={"value": "Not a tone"}).status_code == 422
        assert http.post("settings/set/wifi", data={"value": "false"}).json() == {"checked": False}
        assert http.post("clock/alarms/new", data={"time": "7:05", "label": "x"}).status_code == 200
    st = client.state(sid)
    assert any(c["name"] == "Zed Zulu" for c in st["contacts"])
    assert st["expenses"][0]["amount_cents"] == 350
    assert st["settings"]["wifi"] is False
    assert any(a["time"] == "07:05" for a in st["alarms"])
    assert st["flash"] == "Alarm saved"


def test_sessions_are_isolated_under_concurrent_writes(server, client):
    a, b = client.create(make_world(4)), client.create(make_world(4))
    errors: list[BaseException] = []

    def add_tasks(sid: str, prefix: str) -> None:
        try:
            with httpx.Client(base_url=server.session_url(sid)) as http:
                for i in range(15):
                    assert http.post("tasks/add", data={"title": f"{prefix}{i}"}).status_code == 200
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=add_tasks, args=(sid, p)) for sid, p in ((a, "a"), (b, "b"), (a, "c"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ta = [t["title"] for t in client.state(a)["todos"]]
    tb = [t["title"] for t in client.state(b)["todos"]]
    assert sum(t[0] in "ac" and t[1:].isdigit() for t in ta) == 30 and not any(t.startswith("b") and t[1:].isdigit() for t in ta)
    assert sum(t.startswith("b") and t[1:].isdigit() for t in tb) == 15
    ids = [t["id"] for t in client.state(a)["todos"]]
    assert len(ids) == len(set(ids)), "ids must stay unique under concurrent writes"


def test_store_evicts_least_recent():
    store = SessionStore(max_sessions=2)
    s1, s2 = store.create(), store.create()
    store.get(s1)
    with store.edit(s1):
        pass
    s3 = store.create()
    assert len(store) == 2
    with pytest.raises(KeyError):
        store.get(s2)
    assert store.get(s1) and store.get(s3)


def test_server_stops_and_frees_its_port():
    srv = AppServer().start()
    url = srv.url
    assert httpx.get(f"{url}/api/health").json()["ok"] is True
    srv.stop()
    srv.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/api/health", timeout=2)


def test_store_versions_move_with_every_change_and_never_come_back():
    """A session's version moves at every edit and reset, stays for reads, and is never one it or
    another session had before (a session made again under the same id included)."""
    store = SessionStore(max_sessions=2)
    sid = store.create(make_world(1))
    seen = [store.version(sid)]
    store.get(sid)
    with store.view(sid):
        pass
    assert store.version(sid) == seen[-1]
    with store.edit(sid) as st:
        st["flash"] = "x"
    seen.append(store.version(sid))
    store.reset(sid, make_world(2))
    seen.append(store.version(sid))
    store.delete(sid)
    with pytest.raises(KeyError):
        store.version(sid)
    store.reset(sid, make_world(1))  # the same id again
    seen.append(store.version(sid))
    assert seen == sorted(set(seen)), seen
    other = store.create()
    store.create()  # evicts the least recent: sid
    with pytest.raises(KeyError):
        store.version(sid)
    assert store.version(other) > seen[-1]


def test_a_tasks_checks_share_one_state_copy_until_the_session_changes():
    """evaluate and milestones read one copy of the state while the session does not change (the
    in-process client says by its version), and a fresh one as soon as it does; over HTTP, where no
    version is known, each check reads afresh."""
    import random

    from emulators.suites.webapps import TASKS

    srv = AppServer().start()
    try:
        cls = TASKS["contacts_delete"]
        task = cls(cls.sample_params(random.Random(7)))
        local = LocalClient(srv)
        task._client, task.sid = local, local.create(task.initial_state())
        reads = []
        real_state = local.state
        local.state = lambda sid: reads.append(sid) or real_state(sid)  # type: ignore[method-assign]
        assert task.evaluate(None) == 0.0 and not all(task.milestones(None))
        assert len(reads) == 1  # the two checks, one copy
        first = task._check_state()
        with srv.store.edit(task.sid) as st:  # the agent deletes the contact the task names
            st["contacts"] = [c for c in st["contacts"] if c["id"] != task.params["cid"]]
        assert task.evaluate(None) == 1.0 and len(reads) == 2
        assert task._check_state() is not first
        # the copy is the session's own state, not the live one
        assert task._check_state() == real_state(task.sid) and task._check_state() is not srv.store._sessions[task.sid]
        http = AppClient(srv.url)
        try:
            task._client = http
            assert task._check_state() is not task._check_state()  # no version over HTTP: afresh each time
        finally:
            http.close()
    finally:
        srv.stop()
