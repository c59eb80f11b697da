// The session list beside the chat: search, a new session, and switching sessions in place
// (the chat swaps its socket and state; the page is not reloaded: the sidebar asks for it
// through the store's "open-session", which socket.js hears).
import { call, showError } from "./chat/api.js";
import { el } from "./chat/dom.js";
import { currentSessionId, emit, sidebarState } from "./chat/store.js";
import { closeDrawers } from "./drawers.js";

async function load() {
  const q = document.getElementById("sidebar-search").value.trim();
  const mine = ++sidebarState.asked;
  let page;
  try {
    page = await call("GET", `/api/sessions/?limit=50${q ? `&q=${encodeURIComponent(q)}` : ""}`);
  } catch (err) {
    showError(err.message);
    return;
  }
  if (mine !== sidebarState.asked) return; // a newer search answered first
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
      emit("open-session", s.id);
    });
    li.append(a);
    return li;
  }));
  if (!page.results.length) ul.replaceChildren(el("li", "muted", q ? `No session matches “${q}”.` : "No sessions yet."));
  markCurrent(currentSessionId());
}

export function markCurrent(id) {
  for (const a of document.querySelectorAll("#sidebar-list a")) {
    if (a.dataset.sessionId === id) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

export function initSidebar() {
  document.getElementById("sidebar-search").addEventListener("input", () => {
    clearTimeout(sidebarState.searchTimer);
    sidebarState.searchTimer = setTimeout(load, 200);
  });
  document.getElementById("sidebar-new").addEventListener("click", async () => {
    showError("");
    try {
      const made = await call("POST", "/api/sessions/", { title: "New session" });
      document.getElementById("sidebar-search").value = "";
      await load();
      emit("open-session", made.id);
    } catch (err) { showError(err.message); }
  });
  load();
}
