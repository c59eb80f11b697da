// The session list beside the chat: search, a new session, and switching sessions in place
// (the chat swaps its socket and state; the page is not reloaded: the sidebar asks for it
// through the store's "open-session", which socket.js hears).
import { call, showError } from "./chat/api.js";
import { el } from "./chat/dom.js";
import { currentSessionId, emit, sidebarState } from "./chat/store.js";
import { closeDrawers } from "./drawers.js";

function link(s, text) {
  const a = el("a", "", text);
  a.href = `/sessions/${s.id}/`;
  a.dataset.sessionId = s.id;
  a.title = s.title || s.id;
  a.addEventListener("click", (e) => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return; // a new tab: as a link
    e.preventDefault();
    closeDrawers();
    emit("open-session", s.id);
  });
  const li = el("li");
  li.append(a);
  return li;
}

const ALT_SUFFIX = / — alternative (\d+) of (\d+)$/;

function group(source, members) {
  // One collapsible entry for a turn's alternatives (runs_app/services/alternatives.py titles
  // them "<source title> — alternative i of n"): "Alternatives of <title> (n)", each inside
  // by its number. Grouped rather than hidden: each is a session of its own (it has its files
  // and its cost, "Open" in the alternatives view leads to it, and a kept one stays too).
  const first = members[0];
  const title = source?.title || (first.title || "").replace(ALT_SUFFIX, "") || "a session";
  const li = el("li", "alt-group");
  li.dataset.group = first.alternative_group;
  const details = el("details");
  const summary = el("summary", "", `Alternatives of ${title} (${members.length})`);
  summary.title = summary.textContent;
  const inner = el("ul");
  const sorted = [...members].sort((a, b) => number(a) - number(b));
  inner.append(...sorted.map((s) => link(s, number(s) ? `Alternative ${number(s)}` : s.title || s.id)));
  details.append(summary, inner);
  li.append(details);
  return li;
}

function number(s) {
  const m = ALT_SUFFIX.exec(s.title || "");
  return m ? Number(m[1]) : 0;
}

function rows(results) {
  // The sessions in the list's order, a source's alternatives grouped right under it (or
  // where the first of them stands, when the source is not in this page of the list).
  const groups = new Map(); // alternative_group -> its sessions
  for (const s of results) {
    if (s.lineage_kind === "alternative" && s.alternative_group) {
      if (!groups.has(s.alternative_group)) groups.set(s.alternative_group, []);
      groups.get(s.alternative_group).push(s);
    }
  }
  const byId = new Map(results.map((s) => [s.id, s]));
  const under = new Map(); // source id -> its groups' keys
  for (const [key, members] of groups) {
    const source = members[0].forked_from_session_id;
    if (source && byId.has(source)) under.set(source, [...(under.get(source) || []), key]);
  }
  const placed = new Set([...under.values()].flat());
  const out = [];
  for (const s of results) {
    const key = s.lineage_kind === "alternative" ? s.alternative_group : "";
    if (key && groups.has(key)) {
      if (!placed.has(key)) { placed.add(key); out.push(group(null, groups.get(key))); }
      continue;
    }
    out.push(link(s, s.title || s.id));
    for (const k of under.get(s.id) || []) out.push(group(s, groups.get(k)));
  }
  return out;
}

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
  ul.replaceChildren(...rows(page.results));
  if (!page.results.length) ul.replaceChildren(el("li", "muted", q ? `No session matches “${q}”.` : "No sessions yet."));
  markCurrent(currentSessionId());
}

export function reloadSidebar() {
  // Sessions made elsewhere in the page (alternatives.js): the list read again.
  return load();
}

export function markCurrent(id) {
  for (const a of document.querySelectorAll("#sidebar-list a")) {
    if (a.dataset.sessionId === id) {
      a.setAttribute("aria-current", "page");
      const group = a.closest("details");
      if (group) group.open = true; // the alternative shown: its group open
    } else a.removeAttribute("aria-current");
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
