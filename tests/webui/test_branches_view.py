"""An episode of a branched rollout shows its tree: per branch point, the sibling branches side by side."""

from guiagent.store import Store
from guiagent.types import Click, Finish, Step, TaskSpec
from tests.webui.conftest import obs
from webui import AppConfig, create_app

SPEC = TaskSpec("webapps", "settings_dark_theme", 7, "turn on the dark theme", 3)


def _episode(store, run, gid, eid, actions, seeds, *, success, metadata):
    w = store.begin_episode(run, SPEC, "model", group_id=gid, episode_id=eid)
    for i, (a, sd) in enumerate(zip(actions, seeds)):
        w.add_step(Step(i, obs(sd), a, response=repr(a), reward=1.0 if success and i == len(actions) - 1 else 0.0,
                        terminated=i == len(actions) - 1))
    w.complete(success, metadata=metadata)


def _tree(tmp_path):
    store = Store.open(tmp_path / "branched")
    run = store.create_run("branched")
    base = "settings_dark_theme:7:i0r0-0"
    _episode(store, run, base + ":trunk", "trunk1", [Click(0.1, 0.1), Click(0.2, 0.2)], [1, 2], success=0.0,
             metadata={"member": 0})
    for k, shot in ((0, 1), (1, 2)):
        for m in range(3):
            _episode(store, run, f"{base}@{k}", f"b{k}{m}", [Click(0.3 + m / 10, 0.5), Finish("success")],
                     [shot, 9], success=float(m == 1),
                     metadata={"member": m, "branch_of": "trunk1", "branch_step": k, "branch_group": f"{base}@{k}"})
    _episode(store, run, "plain-group", "plain", [Click(0.5, 0.5)], [3], success=0.0, metadata={"member": 0})
    store.close()
    return create_app(AppConfig(runs=tmp_path, refresh_s=0.5)).test_client()


def test_trunk_and_branch_pages_show_the_branches_side_by_side(tmp_path):
    client = _tree(tmp_path)
    html = client.get("/episodes/trunk1").get_data(as_text=True)
    assert "Branches" in html and html.count('class="branch-point"') == 2
    assert html.count('<div class="branch">') == 6  # 3 siblings at each of the trunk's two states
    # the labels count steps from 1, as the player does (the trunk's ?step= link keeps the store's index)
    assert "from step 1" in html and "from step 2" in html and "from step 0" not in html and "(this one)" in html
    assert "click x=0.4" in html and "compare?a=trunk1" in html  # each branch's first action, a compare link
    page = client.get("/episodes/b11")
    assert page.status_code == 200
    branch = page.get_data(as_text=True)
    assert 'class="branch current"' in branch and "open the trunk" in branch and "/episodes/trunk1" in branch
    # an episode of no tree has no branches section
    assert "Branches" not in client.get("/episodes/plain").get_data(as_text=True)
    # the JSON API carries the same tree
    tree = client.get("/api/episodes/b11").get_json()["branches"]
    assert tree["trunk"]["episode_id"] == "trunk1" and [pt["step"] for pt in tree["points"]] == [0, 1]
    assert [len(pt["branches"]) for pt in tree["points"]] == [3, 3]
    assert client.get("/api/episodes/plain").get_json()["branches"] is None


def test_a_hand_written_branch_group_without_its_trunk_still_renders(tmp_path):
    store = Store.open(tmp_path / "odd")
    run = store.create_run("odd")
    # a store written by another tool: branch metadata naming a trunk that is not there
    _episode(store, run, "x@0", "lonely", [Click(0.5, 0.5)], [1], success=1.0,
             metadata={"branch_of": "missing", "branch_step": 0})
    store.close()
    client = create_app(AppConfig(runs=tmp_path, refresh_s=0.5)).test_client()
    html = client.get("/episodes/lonely").get_data(as_text=True)
    assert "Branches" in html and html.count('class="branch current"') == 1


def test_the_episode_list_tags_trunks_and_branches_and_filters_a_branch_point(tmp_path):
    import re

    client = _tree(tmp_path)
    key = client.get("/api/runs").get_json()["runs"][0]["key"]
    html = client.get(f"/runs/{key}/episodes").get_data(as_text=True)
    assert html.count(">trunk</span>") == 1
    assert html.count(">branch from step 1</a>") == 3 and html.count(">branch from step 2</a>") == 3
    href = re.search(r'href="([^"]*group=[^"]*@0)"', html).group(1)
    point = client.get(href).get_data(as_text=True)
    assert point.count("<tr><td>") == 3 and 'name="group" size="14" value="' in point  # the filter shows in the form
