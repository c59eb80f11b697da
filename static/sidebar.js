// The session list beside the chat: search, a new session, and switching sessions in place
// (the chat swaps its socket and state; the page is not reloaded).
import { el } from "./chat/dom.js";
import { closeDrawers } from "./drawers.js";

let app = null; // {call, showError, open(id), current()}
let searchTimer = null;
let asked = 0;

async function load() {
  const q = document.getElementById("sidebar-search").value.trim();
  const mine = ++asked;
  let page;
  try {
    page = await app.call("GET", `/api/sessions/?limit=50${q ? `&q=${encodeURIComponent(q)}` : ""}`);
  } catch (err) {
    app.showError(err.message);
    return;
  }
  if (mine !== asked) return; // a newer search answered first
  const ul = document.getElementById("sidebar-list");
  ul.replaceChildren(...page.results.map((s) => {
    const li = el("li");
    const a = el("a", "", s.title || s.id);
    a.href = `/sessions/${s.id}/`;
    a.dataset.sessionId = s.id;
    a.title = s.title || s.id;
    a.addEventListener("click", (e) => {
      if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return; // a new tab: as a link
      e.preventDefault();
      closeDrawers();
      app.open(s.id);
    });
    li.append(a);
    return li;
  }));
  if (!page.results.length) ul.replaceChildren(el("li", "muted", q ? `No session matches “${q}”.` : "No sessions yet."));
  markCurrent(app.current());
}

export function markCurrent(id) {
  for (const a of document.querySelectorAll("#sidebar-list a")) {
    if (a.dataset.sessionId === id) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

export function initSidebar(options) {
  app = options;
  document.getElementById("sidebar-search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(load, 200);
  });
  document.getElementById("sidebar-new").addEventListener("click", async () => {
    app.showError("");
    try {
      const made = await app.call("POST", "/api/sessions/", { title: "New session" });
      document.getElementById("sidebar-search").value = "";
      await load();
      app.open(made.id);
    } catch (err) { app.showError(err.message); }
  });
  load();
}
