"""The JSON API on a real store: shapes, filters, keyset pages, errors."""

from __future__ import annotations


def test_runs_lists_both_run_directories(client, runs):
    data = client.get("/api/runs").get_json()
    by_key = {r["key"]: r for r in data["runs"]}
    assert set(by_key) == {runs.train_key, runs.eval_key}
    train = by_key[runs.train_key]
    assert (train["name"], train["status"], train["algo"], train["model"]) == ("grpo-demo", "running", "grpo",
                                                                              "tiny-qwen")
    assert train["num_episodes"] == 14 and train["dir"] == "train"
    assert by_key[runs.eval_key]["dir"] == "evals/held-out"
    assert by_key[runs.eval_key]["success_rate"] == 0.5
    assert data["refresh_s"] == 0.5


def test_run_detail_has_config_and_filter_menus(client, runs):
    d = client.get(f"/api/runs/{runs.train_key}").get_json()
    assert d["config"]["lr"] == 1e-5
    assert d["tasks"] == ["notes_edit", "todo_add"]
    assert d["agents"] == ["model", "oracle"]
    assert d["judges"] == ["vlm"]
    assert {"task", "progress", "parse"} <= set(d["reward_components"])
    assert "success_rate" in d["metric_names"]


def test_metrics_grouped_into_charts(client, runs):
    d = client.get(f"/api/runs/{runs.train_key}/metrics").get_json()
    assert d["metrics"]["success_rate"][3][:2] == [3, 0.3]
    assert len(d["metrics"]["loss"]) == 10
    titles = {c["title"]: c["series"] for c in d["charts"]}
    assert titles["Success rate"] == ["eval_success", "eval_success_unseen", "success_rate"]
    assert titles["Reward components"] == ["reward/progress", "reward/task"]
    assert titles["Episode length"] == ["episode_length"]
    assert titles["Parse errors"] == ["parse_errors"]
    assert titles["loss"] == ["loss"]
    assert d["tasks"] == []  # a training run charts its metrics, not per-task bars


def test_metrics_of_an_eval_run_fall_back_to_task_success(client, runs):
    d = client.get(f"/api/runs/{runs.eval_key}/metrics").get_json()
    assert d["charts"] == [] and d["metrics"] == {}
    rates = {t["task_id"]: (t["num_episodes"], t["success_rate"]) for t in d["tasks"]}
    assert rates == {"todo_add": (2, 1.0), "notes_edit": (2, 0.0), "contacts_add": (2, 0.5)}


def test_episode_filters(client, runs):
    base = f"/api/runs/{runs.train_key}/episodes"

    def ids(query: str) -> set[str]:
        d = client.get(f"{base}?limit=100&{query}").get_json()
        return {e["episode_id"] for e in d["items"]}

    assert len(ids("")) == 14
    assert ids("task=notes_edit") == {f"ep-{k:02d}" for k in range(1, 12, 2)}
    assert ids("outcome=success") == {"ep-rich"} | {f"ep-{k:02d}" for k in (0, 3, 6, 9)}
    assert ids("agent=oracle") == {"ep-00", "ep-05", "ep-10"}
    assert ids("min_length=4&max_length=4") == {"ep-03", "ep-07", "ep-11"}
    assert ids("min_reward=0.5") == ids("outcome=success")
    assert ids("policy_version=3") == {"ep-rich"}
    assert ids("policy_version=2") == {"ep-sib", "ep-08", "ep-09", "ep-10", "ep-11"}
    assert ids("disagreement=1") == {runs.disagree_id}
    assert ids("disagreement=0") == {runs.rich_id}
    assert ids("judge=vlm") == {runs.rich_id, runs.disagree_id}


def test_sort_and_keyset_pages_cover_everything_once(client, runs):
    base = f"/api/runs/{runs.train_key}/episodes?sort=reward&order=desc&limit=4&count=1"
    seen, url, pages = [], base, 0
    while url:
        d = client.get(url).get_json()
        assert d["total"] == 14
        seen += d["items"]
        pages += 1
        url = f"{base}&cursor={d['next_cursor']}" if d["next_cursor"] else None
    assert pages == 4 and len({e["episode_id"] for e in seen}) == 14
    rewards = [e["total_reward"] for e in seen]
    assert rewards == sorted(rewards, reverse=True)
    asc = client.get(f"/api/runs/{runs.train_key}/episodes?sort=length&order=asc&limit=100").get_json()
    lengths = [e["num_steps"] for e in asc["items"]]
    assert lengths == sorted(lengths) and lengths[-1] == 9


def test_bad_queries_are_400_with_a_message(client, runs):
    base = f"/api/runs/{runs.train_key}/episodes"
    for q, word in [("sort=bogus", "sort"), ("outcome=maybe", "outcome"), ("min_length=x", "min_length"),
                    ("limit=0", "limit"), ("min_reward=nan", "min_reward"),
                    ("disagreement=perhaps", "disagreement"),
                    ("min_length=5&max_length=2", "min_length"), ("cursor=!!!", "cursor"),
                    ("order=sideways", "order"), ("seed=" + "9" * 30, "seed"),
                    ("policy_version=-" + "9" * 30, "policy_version")]:
        r = client.get(f"{base}?{q}")
        assert r.status_code == 400, q
        assert word in r.get_json()["error"], (q, r.get_json())
    # a cursor made for another sort order is refused, not misread
    huge = "WyJzdGFydGVkIiwgdHJ1ZSwgMS4wLCAxMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwXQ"  # pk = 10**30
    assert client.get(f"{base}?cursor={huge}").status_code == 400
    c = client.get(f"{base}?limit=2&sort=reward").get_json()["next_cursor"]
    assert client.get(f"{base}?limit=2&sort=length&cursor={c}").status_code == 400


def test_episode_with_steps_and_overlays(client, runs):
    d = client.get(f"/api/episodes/{runs.rich_id}").get_json()
    assert d["run"] == runs.train_key
    assert d["episode"]["task_id"] == "todo_add" and d["episode"]["num_steps"] == 9
    steps = d["steps"]
    assert [s["index"] for s in steps] == list(range(9))
    kinds = [s["overlay"]["kind"] for s in steps]
    assert kinds == ["click", "long_press", "type", "swipe", "drag", "scroll", "key", "parse_error", "finish"]
    click = steps[0]["overlay"]
    assert (click["width"], click["height"]) == (360, 640)
    circle = next(s for s in click["shapes"] if s["type"] == "circle")
    assert (circle["cx"], circle["cy"]) == (90.0, 128.0)  # 0.25 * 360, 0.2 * 640: the screenshot's pixels
    assert steps[7]["parse_error"]["code"] == "no_action" and steps[7]["action"] is None
    assert steps[6]["action_error"].startswith("key <b>")
    assert steps[0]["reward_parts"] == {"task": 0.0, "progress": 0.5}
    assert steps[8]["milestones"] == [True, True]
    assert steps[0]["screenshot_url"] == f"/img/{runs.train_key}/{steps[0]['screenshot_ref']}"
    judges = {(j["judge"], j["step"]): j for j in d["judgements"]}
    assert judges[("vlm", None)]["score"] == 0.9 and judges[("vlm", 2)]["reason"] == "typed the right text"
    assert d["reward_totals"]["task"] == 1.0
    final = d["final_observation"]
    assert final["screenshot_url"] == f"/img/{runs.train_key}/{final['screenshot_ref']}"
    assert client.get(final["screenshot_url"]).status_code == 200
    sib = client.get(f"/api/episodes/{runs.sibling_id}").get_json()
    assert sib["final_observation"] is None


def test_one_step_and_siblings(client, runs):
    s = client.get(f"/api/episodes/{runs.rich_id}/steps/2").get_json()
    assert s["action"]["kind"] == "type" and s["action"]["submit"] is True
    assert client.get(f"/api/episodes/{runs.rich_id}/steps/99").status_code == 404
    sib = client.get(f"/api/episodes/{runs.rich_id}/siblings").get_json()
    ids = [e["episode_id"] for e in sib["items"]]
    assert runs.sibling_id in ids and runs.rich_id not in ids
    assert all(e["task_id"] == "todo_add" for e in sib["items"])


def test_unknown_things_are_json_404(client, runs):
    for url in ["/api/runs/nope", "/api/runs/nope/episodes", "/api/runs/nope/metrics", "/api/episodes/nope",
                "/api/episodes/nope/steps/0", "/api/nothing"]:
        r = client.get(url)
        assert r.status_code == 404, url
        assert r.get_json()["status"] == 404


def test_any_query_string_is_answered_200_or_400(client, runs):
    """Fuzzed filter values: never a server error, and a 400 always says why."""
    from urllib.parse import urlencode

    from hypothesis import HealthCheck, given, settings, strategies as st

    names = ("task outcome status min_reward max_reward min_length max_length policy_version agent seed "
             "judge disagreement judged sort order limit cursor count").split()
    keys = st.sampled_from(names)
    values = st.one_of(
        st.text(max_size=12), st.integers(-5, 10**6).map(str), st.integers().map(str),
        st.sampled_from(["9" * 30, "-" + "9" * 30, "WyJzdGFydGVkIix0cnVlLDEsMV0", "nan", "inf",
                         "-1e309", "success", "failure", "1", "0", "asc", "reward", "%00", "../x"]))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.dictionaries(keys, values, max_size=4))
    def check(params):
        r = client.get(f"/api/runs/{runs.train_key}/episodes?{urlencode(params)}")
        assert r.status_code in (200, 400), (params, r.status_code)
        if r.status_code == 400:
            assert r.get_json()["error"]
        page = client.get(f"/runs/{runs.train_key}/episodes?{urlencode(params)}")
        assert page.status_code == r.status_code  # the page shows the same error above its form
        if page.status_code == 400:
            assert b'class="error' in page.data or b"error" in page.data

    check()


def test_engine_gap_metrics_grouped_into_their_charts():
    """A rescored run's engine-vs-learner figures: the gap in one chart, the TIS weights in another."""
    from webui.data import chart_groups

    charts = {c["title"]: c["series"] for c in chart_groups(
        ["success_rate", "mismatch_kl", "mismatch_mean_abs", "mismatch_max_abs", "tis_weight_mean", "tis_clip_frac"])}
    assert charts["Engine-learner log-prob gap"] == ["mismatch_kl", "mismatch_max_abs", "mismatch_mean_abs"]
    assert charts["Truncated importance weights"] == ["tis_clip_frac", "tis_weight_mean"]


def test_the_rollouts_entropy_and_the_updates_share_a_chart():
    from webui.data import chart_groups

    charts = {c["title"]: c["series"] for c in chart_groups(["entropy", "update_entropy", "alarm/entropy", "loss"])}
    assert charts["Policy entropy"] == ["entropy", "update_entropy"]
    assert charts["alarm/entropy"] == ["alarm/entropy"]
