/* Replay and compare: step through server-rendered steps with buttons, the filmstrip
   and the keyboard (←/→, Home/End). Only toggles visibility and writes text with
   textContent; every model string was escaped on the server. */
(function () {
  'use strict';

  function Player(el) {
    this.el = el;
    this.count = parseInt(el.dataset.count, 10) || 0;
    this.sections = Array.prototype.slice.call(el.querySelectorAll('.steps > .step[data-index]'))
      .filter(function (s) { return /^\d+$/.test(s.dataset.index); });
    this.ended = el.querySelector('.steps > .step.ended');
    this.finalShot = el.querySelector('.steps > .step.final');  // the screen after the last step
    this.last = this.count - 1 + (this.finalShot ? 1 : 0);      // last index this player can show
    this.counter = el.querySelector('.step-counter');
    this.thumbs = Array.prototype.slice.call(el.querySelectorAll('.filmstrip .thumb'));
    this.index = parseInt(el.dataset.start, 10) || 0;
    var self = this;
    function bind(cls, fn) {
      var b = el.querySelector(cls);
      if (b) { b.addEventListener('click', function (ev) { ev.preventDefault(); fn(); }); }
    }
    bind('.nav-first', function () { self.onNav('first'); });
    bind('.nav-prev', function () { self.onNav('prev'); });
    bind('.nav-next', function () { self.onNav('next'); });
    bind('.nav-last', function () { self.onNav('last'); });
    this.thumbs.forEach(function (t) {
      t.addEventListener('click', function (ev) {
        ev.preventDefault();
        self.onNav('goto', parseInt(t.dataset.index, 10));
      });
    });
    this.onNav = function (what, i) { controller.nav(self, what, i); };
    // the marks layer: every numbered element of the screen, as the model saw them
    this.marksBox = el.querySelector('.toggle-marks');
    if (this.marksBox) {
      var on = false;
      try { on = window.localStorage.getItem('guiagent.marks') === '1'; } catch (e) { /* storage off */ }
      this.setMarks(on);
      this.marksBox.addEventListener('change', function () { self.setMarks(self.marksBox.checked, true); });
    }
  }

  Player.prototype.setMarks = function (on, remember) {
    this.el.classList.toggle('show-marks', on);
    if (this.marksBox) { this.marksBox.checked = on; }
    if (remember) {
      try { window.localStorage.setItem('guiagent.marks', on ? '1' : '0'); } catch (e) { /* storage off */ }
    }
  };

  /* Show step i; index count is the final screen (when stored); past that, in the
     compare view, "episode ended". */
  Player.prototype.show = function (i) {
    this.index = i;
    var isFinal = this.finalShot !== null && i === this.count;
    var past = i > this.last;
    this.sections.forEach(function (s, k) { s.hidden = k !== i; });
    if (this.finalShot) { this.finalShot.hidden = !isFinal; }
    if (this.ended) { this.ended.hidden = !past; }
    this.counter.textContent = isFinal ? 'Final screen'
      : this.count === 0 ? 'no steps'
      : past ? 'ended after ' + this.count + ' steps' : 'Step ' + (i + 1) + ' / ' + this.count;
    this.thumbs.forEach(function (t, k) { t.classList.toggle('active', k === i); });
    var active = this.thumbs[i];
    var strip = active && active.closest('.filmstrip');
    if (strip) {  // scroll the strip sideways only; scrollIntoView would also move the page
      var li = active.parentNode;
      if (li.offsetLeft < strip.scrollLeft) { strip.scrollLeft = li.offsetLeft - 8; }
      else if (li.offsetLeft + li.offsetWidth > strip.scrollLeft + strip.clientWidth) {
        strip.scrollLeft = li.offsetLeft + li.offsetWidth - strip.clientWidth + 8;
      }
    }
    // fetch the next screenshot now so stepping on feels instant
    var nextSection = i + 1 < this.count ? this.sections[i + 1] : (i + 1 === this.count ? this.finalShot : null);
    var next = nextSection && nextSection.querySelector('.shot img');
    if (next) { next.loading = 'eager'; }
  };

  var controller = {
    players: [],
    active: null,
    linked: function () {
      var box = document.getElementById('link-steps');
      return !box || box.checked;
    },
    maxCount: function () {
      return this.players.reduce(function (m, p) { return Math.max(m, p.last + 1); }, 0);
    },
    target: function (i, what, last) {
      if (what === 'first') { return 0; }
      if (what === 'last') { return Math.max(last, 0); }
      if (what === 'prev') { return Math.max(i - 1, 0); }
      if (what === 'next') { return Math.min(i + 1, Math.max(last, 0)); }
      return Math.min(Math.max(i, 0), Math.max(last, 0));
    },
    nav: function (player, what, i) {
      this.active = player;
      var base = what === 'goto' ? i : player.index;
      if (this.linked() && this.players.length > 1) {
        var to = this.target(base, what, this.maxCount() - 1);
        this.players.forEach(function (p) { p.show(to); });
      } else {
        player.show(this.target(base, what, player.last));
      }
      this.remember();
    },
    remember: function () {
      if (!window.history || !history.replaceState) { return; }
      var p = this.active || this.players[0];
      var url = new URL(window.location.href);
      url.searchParams.set('step', String(p.index));
      history.replaceState(null, '', url.toString());
    }
  };

  document.querySelectorAll('.player').forEach(function (el) {
    var p = new Player(el);
    controller.players.push(p);
    el.addEventListener('mousedown', function () { controller.active = p; });
  });
  if (!controller.players.length) { return; }
  controller.active = controller.players[0];
  controller.players.forEach(function (p) { p.show(p.index); });

  document.addEventListener('keydown', function (ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) { return; }
    var tag = (ev.target && ev.target.tagName) || '';
    var onToggle = ev.target && ev.target.classList && ev.target.classList.contains('toggle-marks');
    if ((tag === 'INPUT' && !onToggle) || tag === 'SELECT' || tag === 'TEXTAREA') { return; }
    if (ev.key === 'm' || ev.key === 'M') {  // every player follows the active one's marks toggle
      var act = controller.active;
      if (act && act.marksBox) {
        var on = !act.el.classList.contains('show-marks');
        controller.players.forEach(function (p) { if (p.marksBox) { p.setMarks(on, true); } });
      }
      return;
    }
    var what = { ArrowLeft: 'prev', ArrowRight: 'next', Home: 'first', End: 'last' }[ev.key];
    if (!what) { return; }
    ev.preventDefault();
    controller.nav(controller.active, what);
  });
}());
