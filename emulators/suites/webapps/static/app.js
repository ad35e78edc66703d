// Behaviour of the webapps suite: dialogs, every change as a POST to the server, and page changes
// rendered in the open document (no page loads).
// window.__pending counts POSTs in flight so scripted solvers can wait for them.
(function () {
  window.__pending = 0;
  // where this page was opened from (a new episode's first page has none): Back-like redirects use it
  let referrer = document.referrer;

  // POST, then apply the answer. A one-shot timer is held until the answer is applied, so an
  // observer that waits for pending timers and navigations (the browser device's settling) does
  // not look at the page between the response and the navigation it causes.
  // An answer that comes after the page changed is dropped, as a page load would drop it.
  let hold, page = 0;
  async function submit(url, body, el) {
    const mine = page;
    window.__pending++;
    hold = setTimeout(() => {}, 1000);
    let navigating = false;
    try {
      const resp = await fetch(url, { method: "POST", body: body });
      const res = await resp.json();
      if (mine === page) navigating = apply(res, el);
    } finally {
      if (mine === page) {
        window.__pending--;
        if (!navigating) clearTimeout(hold);
      }
    }
  }

  function go(res) {
    if (res.pop && referrer && new URL(referrer).pathname === new URL(res.redirect, location.href).pathname) {
      history.back();  // back to the list we came from, like a phone app closing its screen
    } else if (res.replace) {
      location.replace(res.redirect);
    } else {
      location.assign(res.redirect);
    }
  }

  // Returns true when it started a navigation.
  function apply(res, el) {
    if (res.redirect) { go(res); return true; }
    if (res.reload) { location.reload(); return true; }
    if (res.errors) {
      const scope = el.closest("form") || document;
      scope.querySelectorAll("[data-error-for]").forEach((p) => {
        const msg = res.errors[p.dataset.errorFor] || "";
        p.textContent = msg;
        const input = scope.querySelector(`[name="${p.dataset.errorFor}"]`);
        if (input && input.type !== "radio") input.setAttribute("aria-invalid", msg ? "true" : "false");
      });
      return false;
    }
    if (el.getAttribute("role") === "radio") {
      el.closest('[role="radiogroup"]').querySelectorAll('[role="radio"]').forEach((r) => r.setAttribute("aria-checked", r === el ? "true" : "false"));
      document.querySelectorAll(`[data-shows="${res.key}"]`).forEach((s) => { s.textContent = res.value; });
      if (res.key === "font_size") document.documentElement.className = document.documentElement.className.replace(/font-\w+/, "font-" + res.value.toLowerCase());
      const sheet = el.closest("dialog");
      if (sheet) sheet.close();
      return false;
    }
    if ("checked" in res) el.setAttribute(el.hasAttribute("aria-pressed") ? "aria-pressed" : "aria-checked", res.checked ? "true" : "false");
    return false;
  }

  const openedFrom = new WeakMap();  // an open dialog -> [the element focused before it, its focus ring]
  document.addEventListener("click", async (ev) => {
    const opener = ev.target.closest("[data-open]");
    if (opener) {
      ev.preventDefault();
      document.querySelectorAll("dialog[open]").forEach((d) => d.close());
      const dialog = document.getElementById(opener.dataset.open);
      const a = document.activeElement;  // where focus goes back when the dialog closes (a snapshot keeps it)
      openedFrom.set(dialog, a && a !== document.body ? [a, a.matches(":focus-visible")] : null);
      dialog.showModal();
      return;
    }
    const closer = ev.target.closest("[data-close]");
    if (closer) {
      ev.preventDefault();
      closer.closest("dialog").close();
      return;
    }
    const el = ev.target.closest("[data-post]");
    if (el) {
      ev.preventDefault();
      const body = new FormData();
      if (el.getAttribute("role") === "switch" || el.getAttribute("role") === "checkbox" || el.hasAttribute("aria-pressed")) {
        const on = (el.getAttribute("aria-checked") || el.getAttribute("aria-pressed")) !== "true";
        body.append("value", on ? "true" : "false");
      } else {
        body.append("value", el.dataset.value || "");
      }
      await submit(el.dataset.post, body, el);
    }
  });

  document.addEventListener("submit", async (ev) => {
    const form = ev.target;
    if (!form.matches("form[data-fetch]")) return;
    ev.preventDefault();
    await submit(form.action, new FormData(form), form);
  });

  function init() {
    if (document.querySelector(".snackbar")) document.body.classList.add("has-snack");
  }
  // inlined in <head>: the body comes after
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init, { once: true });
  else init();

  const assets = (d) => Array.from(d.head.querySelectorAll("link, script, style, meta"), (e) => e.outerHTML).join("\n");

  // The page at `url` in place of this one, without a page load: fetched, then its <html>
  // attributes, <head> and <body> put in place of this page's (dialogs, focus, selection and
  // the old page's listeners go with the old body), as a load of that url would show it (an
  // error page too). `appOnly`: only an app page built on this page's stylesheet and script
  // (false, having changed nothing on screen, otherwise).
  async function swap(url, referrerPolicy, appOnly) {
    const resp = await fetch(url, { cache: "no-store", credentials: "same-origin", referrerPolicy: referrerPolicy });
    if (!(resp.headers.get("content-type") || "").startsWith("text/html")) return false;
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    if (appOnly && (!resp.ok || resp.redirected || assets(doc) !== assets(document))) return false;
    put(doc);
    return true;
  }

  // `doc`'s <html> attributes, <head> and <body> in place of this page's; answers to this page's
  // POSTs still in flight are dropped
  function put(doc) {
    const sameHead = assets(doc) === assets(document);
    const html = document.documentElement;
    for (const a of Array.from(html.attributes)) html.removeAttribute(a.name);
    for (const a of Array.from(doc.documentElement.attributes)) html.setAttribute(a.name, a.value);
    if (sameHead) document.title = doc.title;  // the stylesheet stays: no need to parse it again
    else document.head.replaceWith(document.adoptNode(doc.head));
    document.body.replaceWith(document.adoptNode(doc.body));
    page++;
    clearTimeout(hold);
    window.__pending = 0;
    init();
  }

  // the referrer each history entry's page was opened with (a page load keeps it with the entry)
  const referrers = new Map();
  if (window.navigation) referrers.set(navigation.currentEntry.key, referrer);

  // A new episode in this document (the browser device's in-page reset): the episode's first
  // page as a fresh load shows it, scrolled to the top, with no referrer. False when it cannot
  // (the device then loads the page for real).
  async function visit(url) {
    if (!(await swap(url, "no-referrer", true))) return false;
    history.replaceState(null, "", url);
    window.scrollTo(0, 0);
    referrer = "";
    referrers.clear();  // the device leaves this entry alone in the history
    scrolls.clear();
    rebuilt.clear();
    if (window.navigation) referrers.set(navigation.currentEntry.key, referrer);
    return true;
  }

  // Moving between the app's pages without page loads: links, redirects, reloads and history
  // traversals (Back) inside the session are intercepted (the Navigation API) and the page
  // rendered in this document; the browser keeps the history entries, resets focus, and scrolls
  // to the top (new pages) or back to where the entry was (Back, reload), as with page loads.
  // An answer that is not HTML (or none) is loaded for real. A one-shot timer is held until the
  // page is in place, as during a POST. window.__webappsPageLoads (set before this script) turns
  // all of it off: every page change is then a page load.
  let fullLoad = !!window.__webappsPageLoads;
  if (window.navigation) navigation.addEventListener("navigate", (e) => {
    if (restoring) {  // a restore rebuilding the history (snapshots, below): it sets scroll and focus itself
      if (e.canIntercept) e.intercept({ scroll: "manual", focusReset: "manual" });
      return;
    }
    if (navigation.currentEntry) scrolls.set(navigation.currentEntry.key, [scrollX, scrollY]);
    if (fullLoad || !e.canIntercept || e.hashChange || e.downloadRequest || e.formData) return;
    // pushState / replaceState (this script's own, at a reset) move nothing: only loads and traversals
    if (e.destination.sameDocument && e.navigationType !== "traverse") return;
    const to = new URL(e.destination.url);
    if (to.origin !== location.origin || !to.pathname.startsWith("/s/")) return;
    const from = location.href, kind = e.navigationType;
    // an entry a restore made: the browser's scroll position for it is the restore's, not the page's
    const rebuiltScroll = kind === "traverse" && rebuilt.has(e.destination.key) ? scrolls.get(e.destination.key) : null;
    clearTimeout(hold);
    hold = setTimeout(() => {}, 1000);
    e.intercept({
      scroll: rebuiltScroll ? "manual" : "after-transition",
      focusReset: "after-transition",
      async handler() {
        let shown = false;
        try {
          shown = await swap(to.href, "strict-origin-when-cross-origin", false);
        } finally {
          if (!shown) {  // no answer, or not a page: load it for real (the entry shows `to` already)
            fullLoad = true;
            location.reload();
          }
        }
        if (!shown) return;
        const key = navigation.currentEntry.key;
        referrer = kind === "traverse" || kind === "reload" ? (referrers.get(key) ?? "") : from;
        referrers.set(key, referrer);
        if (rebuiltScroll) window.scrollTo(rebuiltScroll[0], rebuiltScroll[1]);
      },
    });
  });

  // --- Snapshots (the browser device's snapshot_page / restore_page, docs/webapps.md) ---
  // What a page load cannot give back and this document holds: the history entries (urls, each
  // one's referrer and scroll position), the page as it stands (attributes and text the page
  // changed, form fields as typed, open dialogs, scroll positions, focus and selection). The
  // server holds the rest (the session's state). A capture is taken on a quiet page only.
  let restoring = false;
  const scrolls = new Map();  // entry key -> [x, y] where the page was when it left the entry
  const rebuilt = new Set();  // keys of the entries the last restore made

  const CONTROLS = "input, textarea, select";
  const URL_ATTRS = ["href", "action", "data-post", "formaction", "src"];

  function snapshot() {
    if (fullLoad || window.__pending || !window.navigation || !navigation.currentEntry) return null;
    const cur = navigation.currentEntry;
    const entries = navigation.entries().map((e) => ({
      url: e.url, referrer: referrers.get(e.key) ?? "",
      scroll: e.key === cur.key ? [scrollX, scrollY] : (scrolls.get(e.key) || [0, 0]) }));
    const all = Array.from(document.body.querySelectorAll("*"));
    const controls = Array.from(document.querySelectorAll(CONTROLS), (c) =>
      c.type === "checkbox" || c.type === "radio" ? [c.checked] : c.tagName === "SELECT" ? [c.selectedIndex] : c.value);
    const dialogs = Array.from(document.querySelectorAll("dialog"), (d) => {
      if (!d.open) return 0;
      if (!d.matches(":modal")) return 1;
      const from = openedFrom.get(d);  // focus goes back there on close: it is part of the state
      return from && document.body.contains(from[0]) ? [all.indexOf(from[0]), from[1]] : 2;
    });
    const scrolled = [];
    all.forEach((el, i) => { if (el.scrollTop || el.scrollLeft) scrolled.push([i, el.scrollLeft, el.scrollTop]); });
    const a = document.activeElement;
    let focus = null;
    if (a && a !== document.body && document.body.contains(a)) {
      let sel = null;
      try { if (typeof a.selectionStart === "number") sel = [a.selectionStart, a.selectionEnd, a.selectionDirection]; } catch (err) { sel = null; }
      focus = { index: all.indexOf(a), visible: a.matches(":focus-visible"), sel: sel };
    }
    return { entries: entries, index: cur.index, html: document.documentElement.outerHTML, controls: controls,
             dialogs: dialogs, scrolled: scrolled, focus: focus, scroll: [scrollX, scrollY], fullLoad: false };
  }

  // A state is data that may come from a file or another process: its page is put back as elements,
  // attributes and text only. Whatever could run script once adopted into this document is dropped
  // first: scripts other than this page's own (adopted scripts never run, but none is kept), event
  // handler attributes (on*), javascript:/vbscript:/data:text/html URLs, srcdoc, frames, objects,
  // embeds, <base>, a meta refresh, SVG animations (which can set an href). Our pages hold none of
  // these but their own script, so a restore of our own state is exact.
  const SCRIPTED_URL = /^(javascript|vbscript|data:text\/html|data:image\/svg)/;
  const URLISH = new Set([...URL_ATTRS, "xlink:href", "formaction", "poster", "background", "ping", "lowsrc", "dynsrc"]);
  function inert(doc) {
    const own = new Set(Array.from(document.scripts, (s) => s.outerHTML));
    for (const el of doc.querySelectorAll("script")) if (!own.has(el.outerHTML)) el.remove();
    for (const el of doc.querySelectorAll("iframe, frame, frameset, object, embed, applet, base, portal, "
        + "meta[http-equiv], animate, set, animateMotion, animateTransform, foreignObject")) el.remove();
    for (const el of doc.querySelectorAll("*")) {
      for (const a of Array.from(el.attributes)) {
        const name = a.name.toLowerCase();
        const value = a.value.replace(/[\s\u0000-\u001f]+/g, "").toLowerCase();
        if (name.startsWith("on") || name === "srcdoc" || (URLISH.has(name) && SCRIPTED_URL.test(value))) {
          el.removeAttribute(a.name);
        }
      }
    }
  }

  // Puts a snapshot back in this document. `rewrite`: [[from, to], ...] url prefixes (another
  // session's, or another server's, urls made this one's), applied to the history and to the
  // url attributes of the page. The caller (the device) has left this entry alone in the history.
  async function restore(snap, rewrite) {
    const fix = (u) => {
      for (const [from, to] of rewrite) if (u.startsWith(from)) return to + u.slice(from.length);
      return u;
    };
    restoring = true;
    try {
      const entries = snap.entries.map((e) => ({ url: fix(e.url), referrer: e.referrer ? fix(e.referrer) : "", scroll: e.scroll }));
      history.replaceState(null, "", entries[0].url);
      for (let i = 1; i < entries.length; i++) history.pushState(null, "", entries[i].url);
      const list = navigation.entries();
      if (list.length !== entries.length) return false;
      if (snap.index !== list.length - 1) await navigation.traverseTo(list[snap.index].key).finished;
      referrers.clear(); scrolls.clear(); rebuilt.clear();
      entries.forEach((e, i) => { referrers.set(list[i].key, e.referrer); scrolls.set(list[i].key, e.scroll); rebuilt.add(list[i].key); });
      referrer = entries[snap.index].referrer;

      const doc = new DOMParser().parseFromString(snap.html, "text/html");
      inert(doc);
      for (const attr of URL_ATTRS) {
        for (const el of doc.querySelectorAll(`[${attr}]`)) el.setAttribute(attr, fix(el.getAttribute(attr)));
      }
      put(doc);
      const all = Array.from(document.body.querySelectorAll("*"));
      Array.from(document.querySelectorAll(CONTROLS)).forEach((c, i) => {
        const v = snap.controls[i];
        if (Array.isArray(v)) { if (c.tagName === "SELECT") c.selectedIndex = v[0]; else c.checked = v[0]; }
        else if (v !== undefined) c.value = v;
      });
      Array.from(document.querySelectorAll("dialog")).forEach((d, i) => {
        const how = snap.dialogs[i];
        if (how !== 2 && !Array.isArray(how)) return;
        d.removeAttribute("open");
        const from = Array.isArray(how) ? all[how[0]] : null;
        if (from) from.focus({ preventScroll: true, focusVisible: how[1] });
        openedFrom.set(d, from ? [from, how[1]] : null);
        d.showModal();
      });
      for (const [i, left, top] of snap.scrolled) { if (all[i]) { all[i].scrollLeft = left; all[i].scrollTop = top; } }
      window.scrollTo(snap.scroll[0], snap.scroll[1]);
      const f = snap.focus;
      if (f && all[f.index]) {
        // focusing the element that has focus changes nothing, its focus ring included (showModal's)
        if (document.activeElement === all[f.index]) all[f.index].blur();
        all[f.index].focus({ preventScroll: true, focusVisible: f.visible });
        if (f.sel) { try { all[f.index].setSelectionRange(f.sel[0], f.sel[1], f.sel[2]); } catch (err) { /* not a text field */ } }
      } else if (document.activeElement && document.activeElement !== document.body) {
        document.activeElement.blur();
      }
      return true;
    } finally {
      restoring = false;
    }
  }

  window.webapps = { visit: visit, snapshot: snapshot, restore: restore };
})();
