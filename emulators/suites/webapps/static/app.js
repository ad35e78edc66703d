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

  document.addEventListener("click", async (ev) => {
    const opener = ev.target.closest("[data-open]");
    if (opener) {
      ev.preventDefault();
      document.querySelectorAll("dialog[open]").forEach((d) => d.close());
      document.getElementById(opener.dataset.open).showModal();
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
    const sameHead = assets(doc) === assets(document);
    if (appOnly && (!resp.ok || resp.redirected || !sameHead)) return false;
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
    return true;
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
    if (fullLoad || !e.canIntercept || e.hashChange || e.downloadRequest || e.formData) return;
    // pushState / replaceState (this script's own, at a reset) move nothing: only loads and traversals
    if (e.destination.sameDocument && e.navigationType !== "traverse") return;
    const to = new URL(e.destination.url);
    if (to.origin !== location.origin || !to.pathname.startsWith("/s/")) return;
    const from = location.href, kind = e.navigationType;
    clearTimeout(hold);
    hold = setTimeout(() => {}, 1000);
    e.intercept({
      scroll: "after-transition",
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
      },
    });
  });
  window.webapps = { visit: visit };
})();
