// Best-of-N in the chat (docs/semantics.md §14.3). "Alternatives…" on a user message runs its turn
// again N times at once, each in a fork with its own worktree (POST …/alternatives/); a view
// shows them side by side while they stream (a socket per alternative), then each one's
// changed files and cost; "Keep this one" makes it a branch of this session with its files
// and the head (POST …/adopt/), and the chat reads its path again and says what happened: the
// kept one is the current branch here; every alternative, the kept one too, stays a session of
// its own (adopt copies, it deletes nothing), grouped in the sidebar (sidebar.js).
// The view lies below the site header (its top measured, --alt-top in alternatives.css).
import { call, showError } from "./chat/api.js";
import { el } from "./chat/dom.js";
import { alternativesState as alt, currentSessionId, subscribe } from "./chat/store.js";
import { scheduleReload } from "./chat/sync.js";
import { reloadSidebar } from "./sidebar.js";

// The open "how many" form (`alt.asking`: {messageId, node}) is drawn by the chat inside its message (askNode),
// so a render of that message, which rebuilds its children, keeps it.

export function askNode(messageId) {
  return alt.asking && alt.asking.messageId === messageId ? alt.asking.node : null;
}

export function initAlternatives() {
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && document.getElementById("alternatives-view")) close();
  });
  window.addEventListener("resize", () => {
    const view = document.getElementById("alternatives-view");
    if (view) placeBelowHeader(view);
  });
  subscribe("session", (session) => {
    // The note of a kept alternative belongs to the session it was kept in.
    const note = document.getElementById("alternatives-kept");
    if (note && session && note.dataset.sessionId !== session.id) note.remove();
  });
}

function placeBelowHeader(view) {
  const header = document.querySelector("body > header.top");
  const bottom = header ? Math.max(0, header.getBoundingClientRect().bottom) : 0;
  view.style.setProperty("--alt-top", `${Math.round(bottom)}px`);
}

function btn(label, title, onClick, cls = "secondary small") {
  const b = el("button", cls, label);
  b.type = "button";
  b.title = title;
  b.setAttribute("aria-label", `${label}: ${title}`);
  b.addEventListener("click", onClick);
  return b;
}

export function alternativesButton(m) {
  const b = btn("Alternatives…", "Run this turn again several times at once, side by side", () => ask(m), "act alternatives");
  return b;
}

function ask(m) {
  // A small form in place: how many (2–8), then Start.
  close();
  const box = el("div", "alt-ask");
  box.id = "alternatives-ask";
  const label = el("label", "", "How many alternatives ");
  const n = el("input");
  n.type = "number"; n.min = "2"; n.max = "8"; n.value = "3"; n.id = "alternatives-n";
  n.setAttribute("aria-label", "How many alternatives (2 to 8)");
  label.append(n);
  const start = btn("Start", "Start the alternatives", async () => {
    closeAsk();
    await begin(m, Number(n.value));
  }, "small");
  start.id = "alternatives-start";
  box.append(label, start, btn("Cancel", "Close", closeAsk));
  alt.asking = { messageId: m.id, node: box };
  document.querySelector(`[data-message-id="${m.id}"]`)?.append(box);
  n.focus();
}

function closeAsk() {
  alt.asking?.node.remove();
  alt.asking = null;
}

async function begin(m, n) {
  showError("");
  let answer;
  try {
    answer = await call("POST", `/api/sessions/${currentSessionId()}/alternatives/`, { message_id: m.id, n });
  } catch (err) {
    showError(err.message);
    return;
  }
  open(answer.sessions);
  reloadSidebar(); // their group shows under this session
}

function close() {
  for (const ws of alt.sockets.splice(0)) ws.close();
  document.getElementById("alternatives-view")?.remove();
  closeAsk();
}

function open(ids) {
  close();
  const view = el("div", "alt-view");
  view.id = "alternatives-view";
  view.setAttribute("role", "dialog");
  view.setAttribute("aria-label", "Alternatives side by side");
  const head = el("div", "alt-head");
  head.append(el("strong", "", `${ids.length} alternatives`), el("span", "muted", "each runs in its own fork; keep the one you want"),
    btn("Close", "Close the alternatives (they stay as forks)", close));
  const grid = el("div", "alt-grid");
  grid.style.setProperty("--alt-columns", String(Math.min(ids.length, 4)));
  view.append(head, grid);
  placeBelowHeader(view);
  document.body.append(view);
  ids.forEach((id, i) => grid.append(column(id, i + 1)));
}

function column(id, number) {
  const col = el("section", "alt-col");
  col.dataset.sessionId = id;
  const status = el("span", "badge busy", "running");
  const title = el("h3", "", `Alternative ${number} `);
  title.append(status);
  const text = el("div", "alt-text");
  const files = el("ul", "alt-files");
  const cost = el("p", "muted alt-cost");
  const open = el("a", "small", "Open");
  open.href = `/sessions/${id}/`;
  open.target = "_blank";
  const keep = btn("Keep this one", "Make this alternative the current branch here, with its files", () => adopt(id, number, keep), "small keep");
  keep.disabled = true;
  const row = el("div", "row");
  row.append(keep, open);
  col.append(title, text, files, cost, row);
  const parts = new Map(); // part id -> its text so far
  const paint = () => { text.textContent = [...parts.values()].join("\n\n"); };
  const done = async (state) => {
    status.textContent = state;
    status.className = `badge ${state === "completed" ? "idle" : state}`;
    await summary(id, parts, paint, files, cost);
    keep.disabled = false;
  };
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${proto}://${location.host}/ws/sessions/${id}/`);
  alt.sockets.push(ws);
  let ended = false;
  ws.onmessage = (msg) => {
    const ev = JSON.parse(msg.data);
    if (ev.type === "text-delta") {
      const had = parts.get(ev.part_id) || "";
      if (ev.offset === [...had].length) parts.set(ev.part_id, had + ev.text);
      paint();
    } else if (ev.type === "run.updated" && ["completed", "error", "cancelled"].includes(ev.run.status) && !ended) {
      ended = true;
      done(ev.run.status);
    }
  };
  const check = async () => {
    // A fast run may have ended before the socket opened, and an event may be lost on the
    // way (a loaded or restarting Redis: seen in CI, the column stayed "running"): ask when
    // the socket opens, then every few seconds until the run's end is known.
    if (ended || ws.readyState === WebSocket.CLOSED) return;
    const session = await call("GET", `/api/sessions/${id}/`).catch(() => null);
    if (session && session.status === "idle" && !ended) {
      ended = true;
      done("completed");
      return;
    }
    setTimeout(check, 3000);
  };
  ws.onopen = check;
  return col;
}

async function summary(id, parts, paint, files, cost) {
  // The stored answer (whole), the files it changed, and what it cost.
  // Only the alternative's own turn: what follows its last user message.
  const page = await call("GET", `/api/sessions/${id}/messages/`).catch(() => null);
  let turn = "";
  if (page) {
    const users = page.results.filter((m) => m.role === "user");
    const last = users[users.length - 1];
    turn = last ? last.id : "";
    parts.clear();
    const after = page.results.slice(page.results.findIndex((m) => m.id === turn) + 1);
    for (const m of after) for (const p of m.parts) if (p.type === "text") parts.set(p.id, p.text);
    paint();
  }
  const query = turn ? `?message_id=${encodeURIComponent(turn)}` : "";
  const diff = await call("GET", `/api/sessions/${id}/diff/${query}`).catch(() => []);
  files.replaceChildren(...(diff || []).map((d) => el("li", `change ${d.status}`, `${d.file} +${d.additions} −${d.deletions}`)));
  if (!diff || !diff.length) files.replaceChildren(el("li", "muted", "no files changed"));
  const session = await call("GET", `/api/sessions/${id}/`).catch(() => null);
  const usage = (session && session.usage) || {};
  const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
  cost.textContent = `${tokens.toLocaleString()} tokens · $${Number(usage.cost_usd || 0).toFixed(4)}`;
}

async function adopt(id, number, keep) {
  keep.disabled = true;
  const total = document.querySelectorAll("#alternatives-view .alt-col").length;
  try {
    await call("POST", `/api/sessions/${currentSessionId()}/adopt/`, { session_id: id });
    close();
    kept(number, total);
    scheduleReload(0);
  } catch (err) {
    showError(err.message);
    keep.disabled = false;
  }
}

function kept(number, total) {
  // What "Keep" did, said where the chat is read (docs/semantics.md §14.3): the kept answer
  // is now this session's current branch (the turn's ‹ › switcher goes back to the earlier
  // one); no alternative was deleted: each stays a session of its own, in the sidebar.
  document.getElementById("alternatives-kept")?.remove();
  const others = total - 1;
  const note = el("div", "alt-kept");
  note.id = "alternatives-kept";
  note.setAttribute("role", "status");
  note.dataset.sessionId = currentSessionId();
  const text = el("p", "", `Kept alternative ${number} of ${total}: its answer and its files are now the current branch of this session (the turn's ‹ › switcher shows the earlier answer). ` +
    `Nothing was deleted: ${others === 1 ? "the other alternative stays" : `the other ${others} alternatives stay`}, with the kept one, as sessions of their own, grouped under “Alternatives of …” in the sidebar.`);
  const dismiss = btn("OK", "Hide this note", () => note.remove(), "secondary small");
  note.append(text, dismiss);
  document.getElementById("messages")?.before(note);
}
