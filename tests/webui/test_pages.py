"""HTML pages through the test client: content, links, and the episode list's pages."""

from __future__ import annotations

import re


def test_runs_page_lists_runs_with_their_facts(client, runs):
    html = client.get("/").get_data(as_text=True)
    for text in ("grpo-demo", "eval-demo", "tiny-qwen", "grpo", "status-running", "status-finished",
                 f'data-metrics-url="/api/runs/{runs.train_key}/metrics"', "/static/charts.js"):
        assert text in html, text
    assert re.search(r'class="run-episodes">14<', html)


def test_run_page_has_task_table_and_config(client, runs):
    html = client.get(f"/runs/{runs.train_key}").get_data(as_text=True)
    assert f"/runs/{runs.train_key}/episodes?task=notes_edit" in html
    assert "&#34;lr&#34;: 1e-05" in html or '"lr": 1e-05' in html.replace("&#34;", '"')


def test_episodes_page_filters_sorts_and_pages(client, runs):
    base = f"/runs/{runs.train_key}/episodes"
    html = client.get(f"{base}?task=notes_edit&limit=4&sort=reward&order=asc").get_data(as_text=True)
    assert '<span class="total">6</span>' in html
    assert html.count('href="/episodes/ep-') == 4
    nxt = re.search(r'class="button next" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "cursor=" in nxt and "task=notes_edit" in nxt and "sort=reward" in nxt
    html2 = client.get(nxt).get_data(as_text=True)
    assert html2.count('href="/episodes/ep-') == 2 and "first page" in html2
    assert set(re.findall(r"/episodes/(ep-\d+)", html)).isdisjoint(re.findall(r"/episodes/(ep-\d+)", html2))
    # judge menu and disagreement filter exist because this run has judgements
    assert 'name="disagreement"' in html
    html3 = client.get(f"{base}?disagreement=1").get_data(as_text=True)
    assert re.findall(r'href="/episodes/(ep-[\w-]+)"', html3) == [runs.disagree_id]


def test_episodes_page_shows_a_bad_filter_instead_of_failing(client, runs):
    r = client.get(f"/runs/{runs.train_key}/episodes?min_length=abc")
    assert r.status_code == 400  # still the whole page, with the error above the form
    text = r.get_data(as_text=True)
    assert "min_length=&#39;abc&#39; is not a valid 64-bit integer" in text and "<form" in text


def test_replay_page_renders_every_step_with_overlay_and_details(client, runs):
    r = client.get(f"/episodes/{runs.rich_id}")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert html.count('<section class="step') == 11  # nine steps, the final screen, the "ended" panel
    assert html.count('viewBox="0 0 360 640"') == 9
    assert 'class="overlay overlay-long_press"' in html and 'ring"' in html
    assert "<polygon" in html  # arrow heads of swipe, drag and scroll
    assert "scroll down" in html and "key: Enter" in html
    assert "no_action" in html and "Step 1 / 9" in html
    assert "Open the first row." in html
    assert "typed the right text" in html  # the step-level judgement
    assert 'class="filmstrip"' in html and html.count('class="thumb') == 10  # and the final screen
    assert "Final screen" in html and "final &lt;script&gt;" in html
    assert f"/compare?a={runs.rich_id}&amp;b={runs.sibling_id}" in html
    assert html.count('<section class="step') - html.count("hidden>") == 1  # one visible step


def test_replay_starts_at_the_requested_step(client, runs):
    html = client.get(f"/episodes/{runs.rich_id}?step=4").get_data(as_text=True)
    assert "Step 5 / 9" in html
    visible = re.findall(r'<section class="step[^"]*" data-index="(\d+)" >', html)
    assert visible == ["4"]
    assert "Step 9 / 9" in client.get(f"/episodes/{runs.rich_id}?step=8").get_data(as_text=True)
    # clamped to the last position: the final screen
    last = client.get(f"/episodes/{runs.rich_id}?step=500").get_data(as_text=True)
    assert '<span class="step-counter">Final screen</span>' in last
    assert '<section class="step final" data-index="final" >' in last
    assert "Step 1 / 9" in client.get(f"/episodes/{runs.rich_id}?step=-3").get_data(as_text=True)
    assert client.get(f"/episodes/{runs.rich_id}?step=abc").status_code == 400  # not an integer


def test_disagreeing_judge_is_flagged(client, runs):
    html = client.get(f"/episodes/{runs.disagree_id}").get_data(as_text=True)
    assert "disagrees with the rule outcome" in html


def test_compare_page_has_two_players(client, runs):
    r = client.get(f"/compare?a={runs.rich_id}&b={runs.sibling_id}")
    html = r.get_data(as_text=True)
    assert r.status_code == 200
    assert html.count('class="player"') == 2 and 'id="link-steps"' in html
    assert client.get("/compare?a=ep-rich").status_code == 404
    assert client.get(f"/compare?a={runs.rich_id}&b=nope").status_code == 404


def test_unknown_pages_are_html_404(client):
    for url in ["/runs/nope", "/runs/nope/episodes", "/episodes/nope", "/nope"]:
        r = client.get(url)
        assert r.status_code == 404 and r.mimetype == "text/html", url


def test_page_size_comes_from_the_config(runs):
    from webui import AppConfig, create_app

    c = create_app(AppConfig(runs=runs.root, page_size=5)).test_client()
    html = c.get(f"/runs/{runs.train_key}/episodes").get_data(as_text=True)
    assert html.count('href="/episodes/ep-') == 5 and "next page" in html
    assert len(c.get(f"/api/runs/{runs.train_key}/episodes").get_json()["items"]) == 5
