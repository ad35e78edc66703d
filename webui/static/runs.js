/* Runs page: draw each run's charts from /api/runs/<run>/metrics, and while any run
   is live poll /api/runs every few seconds to refresh counts, status and charts. */
(function () {
  'use strict';
  var C = window.GuiCharts;
  var refreshMs = Math.max(1, parseFloat(document.body.dataset.refreshS) || 3) * 1000;

  function pct(x) { return x === null || x === undefined ? '–' : Math.round(100 * x) + '%'; }

  /* the held-out curves (greedy, seeds no training episode had; unseen: targets none had either) */
  var NAMES = { eval_success: 'held-out', eval_success_unseen: 'held-out, unseen targets',
                success_rate: 'training rollouts' };

  /* "reward/progress" -> "reward/progress ×0.5": a reward part with the weight the run used */
  function weighted(box, name) {
    if (NAMES[name]) { return NAMES[name]; }
    var m = /^rewards?\/(.+)$/.exec(name);
    var w;
    try { w = JSON.parse(box.dataset.rewardWeights || '{}'); } catch (e) { w = {}; }
    return m && typeof w[m[1]] === 'number' ? name + ' \u00d7' + C.fmt(w[m[1]]) : name;
  }

  function draw(card) {
    var box = card.querySelector('.charts');
    if (!box) { return Promise.resolve(); }
    return fetch(box.dataset.metricsUrl, { credentials: 'same-origin' })
      .then(function (r) { if (!r.ok) { throw new Error('HTTP ' + r.status); } return r.json(); })
      .then(function (data) {
        box.textContent = '';
        if (data.charts.length) {
          data.charts.forEach(function (ch) {
            var series = ch.series.map(function (name) {
              return { name: name, label: weighted(box, name),
                       points: data.metrics[name].map(function (p) { return [p[0], p[1]]; }) };
            });
            C.line(box, ch.title, series, { unit: ch.title === 'Success rate' });
          });
        } else if (data.tasks.length) {
          C.bars(box, 'Success by task (no training metrics)', data.tasks.map(function (t) {
            return { label: t.task_id, value: t.success_rate,
                     note: pct(t.success_rate) + ' of ' + t.num_episodes + (t.num_episodes === 1 ? ' ep.' : ' eps.') };
          }));
        } else {
          var p = document.createElement('p');
          p.className = 'muted';
          p.textContent = 'No metrics or episodes yet.';
          box.appendChild(p);
        }
      })
      .catch(function (err) {
        box.textContent = 'charts unavailable: ' + err.message;
      });
  }

  function update(card, run) {
    var set = function (sel, value) { var e = card.querySelector(sel); if (e) { e.textContent = value; } };
    set('.run-episodes', String(run.num_episodes));
    set('.run-success', pct(run.success_rate));
    set('.run-reward', run.mean_reward === null ? '–' : C.fmt(run.mean_reward));
    var badge = card.querySelector('.run-status .badge');
    if (badge) { badge.textContent = run.status; badge.className = 'badge status-' + run.status; }
    card.dataset.status = run.status;
  }

  var cards = Array.prototype.slice.call(document.querySelectorAll('.run-card'));
  cards.forEach(draw);

  function live() { return cards.some(function (c) { return c.dataset.status === 'running'; }); }

  function poll() {
    if (!live()) { return; }
    fetch(document.body.dataset.apiRuns, { credentials: 'same-origin' })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        var byKey = {};
        data.runs.forEach(function (r) { byKey[r.key] = r; });
        cards.forEach(function (card) {
          var run = byKey[card.dataset.run];
          if (!run) { return; }
          var wasLive = card.dataset.status === 'running';
          update(card, run);
          if (wasLive) { draw(card); }
        });
      })
      .catch(function () { /* the server may be restarting; try again next tick */ })
      .then(function () { window.setTimeout(poll, refreshMs); });
  }
  window.setTimeout(poll, refreshMs);
}());
