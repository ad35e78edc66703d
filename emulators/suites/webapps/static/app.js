// Minimal behaviour for the webapps suite: dialogs, and every change as a POST to the server.
// window.__pending counts POSTs in flight so scripted solvers can wait for them.
(function () {
  window.__pending = 0;
  // where this page was opened from (a new episode's first page has none): Back-like redirects use it
  let referrer = document.referrer;

  // POST, then apply the answer. A one-shot timer is held until the answer is applied, so an
  // observer that waits for pending timers and navigations (the browser device's settling) does
  // not look at the page between the response and the navigation it causes.
  async function submit(url, body, el) {
    window.__pending++;
    const hold = setTimeout(() => {}, 1000);
    let navigating = false;
    try {
      const resp = await fetch(url, { method: "POST", body: body });
      navigating = apply(await resp.json(), el);
    } finally {
      window.__pending--;
      if (!navigating) clearTimeout(hold);
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

  // A new episode in this document, without a page load (the browser device's in-page reset):
  // fetch the episode's first page and put its <html> attributes, title and <body> in place of
  // this page's, as a fresh load would show them; dialogs, focus, selection and scroll go with
  // the old body. Resolves to false, having changed nothing on screen, when the answer is not
  // an app page built on the same stylesheet and script (the device then loads it for real).
  async function visit(url) {
    const resp = await fetch(url, { cache: "no-store", credentials: "same-origin", referrerPolicy: "no-referrer" });
    if (!resp.ok || !(resp.headers.get("content-type") || "").startsWith("text/html")) return false;
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    const assets = (d) => Array.from(d.head.querySelectorAll("link, script, style"),
                                     (e) => e.getAttribute("href") || e.getAttribute("src") || e.textContent).join("\n");
    if (!doc.body || assets(doc) !== assets(document)) return false;
    const html = document.documentElement;
    for (const a of Array.from(html.attributes)) html.removeAttribute(a.name);
    for (const a of Array.from(doc.documentElement.attributes)) html.setAttribute(a.name, a.value);
    document.title = doc.title;
    document.body.replaceWith(document.adoptNode(doc.body));
    history.replaceState(null, "", resp.url);
    window.scrollTo(0, 0);
    window.__pending = 0;
    referrer = "";
    init();
    return true;
  }
  window.webapps = { visit: visit };
})();
