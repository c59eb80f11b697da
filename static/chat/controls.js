// The chat's controls outside the messages: the composer (send, queue behind a run, interrupt,
// stop, resume), the status badge, the head (title, model picker, export links), the session
// menu (roll back, fork, compact, tool permissions) and the remaining budget.
import { api, call, notice, showError, UNREACHABLE } from "./api.js";
import { el, when } from "./dom.js";
import {
  LIVE, continuingFrom, controlState as cs, currentSession, currentStatus, forgetRevertPrompt,
  isOffline, lastTurnUnfinished, redraw, scrollToEndNext, setSession, subscribe,
} from "./store.js";
import { loadMessages, loadTree } from "./sync.js";
import { forkAt, stopContinuing } from "./moves.js";

export const NOT_SENT = "You are offline: the message was not sent. It stays in the box; send it again once the chat has reconnected.";

// -- the status ------------------------------------------------------------------------------
// The store's "status" (the status was set) draws the badge and the controls (initControls).

export function showBadge() {
  const badge = document.getElementById("status");
  const shown = isOffline() ? "offline" : currentStatus();
  badge.textContent = shown;
  badge.className = "badge " + shown;
}

export function updateControls() {
  const offline = isOffline();
  const busy = currentStatus() === "busy";
  const waiting = currentStatus() === "waiting";
  document.getElementById("stop").hidden = offline || (!busy && !waiting);
  document.getElementById("resume").hidden = offline || busy || waiting || !lastTurnUnfinished();
  // While a run goes on, a message is queued behind it (Enter, "Queue") or sent in its place
  // ("Interrupt and send"): the API's multitask strategies `enqueue` and `interrupt`.
  const live = (busy || waiting) && !continuingFrom();
  const send = document.getElementById("send");
  const label = live ? "Queue" : "Send";
  if (send.textContent !== label) {
    send.textContent = label;
    send.title = live ? "Send your message when the current run ends" : "";
    document.getElementById("composer-hint").textContent = live
      ? "A run is going on: Enter queues your message after it; Interrupt and send stops it"
      : "Enter sends · Shift+Enter adds a line";
    document.getElementById("prompt").placeholder = live
      ? "Queue a message for after this run (Enter), or interrupt it"
      : "Message the agent (Enter sends, Shift+Enter adds a line)";
  }
  document.getElementById("interrupt").hidden = offline || !live;
}

// -- the composer ----------------------------------------------------------------------------

async function sendPrompt(strategy) {
  const input = document.getElementById("prompt");
  const text = input.value.trim();
  if (!text || cs.sending) return;
  if (isOffline()) return showError(NOT_SENT);
  showError("");
  cs.sending = true;
  try {
    const from = continuingFrom();
    if (from) {
      await call("POST", `/api/runs/${from.run_id}/continue/`, { continue_from: from.index, input: text });
      stopContinuing();
    } else {
      const body = { messages: [{ role: "user", content: text }] };
      if (strategy) body.multitask_strategy = strategy;
      const run = await call("POST", api("/runs/"), body);
      if (strategy === "enqueue" && run?.status === "pending") showQueued(run.id, text);
      if (strategy === "interrupt") notice("Interrupting the current run: your message goes next.");
    }
    input.value = "";
    forgetRevertPrompt();
    scrollToEndNext();
  } catch (err) {
    showError(err.message === UNREACHABLE ? NOT_SENT : err.message);
    loadBudget();
  } finally {
    cs.sending = false;
    input.focus();
  }
}

export function focusPrompt() {
  // A chat that opens is ready to type in; not where a touch keyboard would cover half the
  // screen unasked, nor away from a field the reader is typing in.
  if (matchMedia("(hover: none) and (pointer: coarse)").matches) return;
  const at = document.activeElement;
  if (at && at !== document.body && at.matches("input, textarea, select")) return;
  document.getElementById("prompt").focus({ preventScroll: true });
}

// Messages queued behind the run that holds the session: said under the box until their run
// starts (or is cancelled here).
function showQueued(runId, text) {
  if (runId) cs.queued.set(runId, text);
  const box = document.getElementById("queued");
  box.hidden = !cs.queued.size;
  if (!cs.queued.size) { box.replaceChildren(); return; }
  const [first, words] = cs.queued.entries().next().value; // the oldest: the next to run
  const short = words.replace(/\s+/g, " ");
  const more = cs.queued.size > 1 ? ` (and ${cs.queued.size - 1} more)` : "";
  const cancel = el("button", "secondary small", "Cancel");
  cancel.type = "button";
  cancel.setAttribute("aria-label", "Cancel the queued message");
  cancel.addEventListener("click", async () => {
    showError("");
    try {
      await call("POST", `/api/runs/${first}/cancel/`, {});
      cs.queued.delete(first);
      showQueued();
    } catch (err) { showError(err.message); }
  });
  box.replaceChildren(
    el("span", "", `Queued: “${short.length > 60 ? short.slice(0, 59) + "…" : short}”${more} — sent when the current run ends.`),
    cancel,
  );
}

export function unqueue(runId) {
  if (cs.queued.delete(runId)) showQueued();
}

export function forgetQueued() {
  cs.queued.clear();
  showQueued();
}

// -- the head and the session menu -------------------------------------------------------------
export function showTitle() {
  const session = currentSession();
  document.getElementById("title").textContent = session.title || session.id;
  document.title = session.title || session.id;
  for (const a of document.querySelectorAll("a.export")) {
    a.href = api(`/export/?format=${a.dataset.format}`);
  }
  for (const a of document.querySelectorAll("a.download")) a.href = api(a.dataset.path);
}

export async function renderModelPicker() {
  const pick = document.getElementById("model-picker");
  if (!pick || !currentSession()) return;
  if (!cs.modelChoices) cs.modelChoices = (await call("GET", "/api/models/")).results.map((m) => m.name);
  const session = currentSession(); // as it is now (an event may have changed it meanwhile)
  const names = cs.modelChoices.includes(session.model) ? cs.modelChoices : [session.model, ...cs.modelChoices];
  pick.replaceChildren(...names.map((name) => {
    const o = el("option", "", name);
    o.value = name;
    o.selected = name === session.model;
    return o;
  }));
}

async function rollback() {
  const n = parseInt(document.getElementById("rollback-n").value, 10);
  document.getElementById("session-menu").open = false;
  showError("");
  try {
    setSession(await call("POST", api("/rollback/"), { num_turns: Number.isNaN(n) ? 0 : n }));
    await loadMessages(false);
    await loadTree();
    redraw();
  } catch (err) { showError(err.message); }
}

const PERMISSION_TOOLS = ["write", "append", "delete", "shell", "read", "list", "wait"];

export async function loadTools() {
  const tools = await call("GET", "/api/tools/").catch(() => null);
  cs.toolsOff.clear();
  for (const t of tools?.results || []) if (!t.available) cs.toolsOff.set(t.name, t.reason || "off");
  renderPermissions();
}

export function renderPermissions() {
  // One choice per tool in the session menu; a tool with pattern rules shows them as set
  // (the API and the admin edit patterns).
  const box = document.getElementById("permissions");
  const session = currentSession();
  if (!box || !session) return;
  const rules = session.permissions || {};
  const rows = [];
  for (const tool of PERMISSION_TOOLS) {
    const rule = rules[tool];
    const label = el("label", "inline-field perm", tool + " ");
    const pick = el("select");
    pick.setAttribute("aria-label", `Permission for ${tool}`);
    pick.dataset.tool = tool;
    const off = cs.toolsOff.get(tool);
    if (off) {
      // Disabled by the deployment: no rule can turn it on, and the menu says so.
      const o = el("option", "", "off");
      o.value = "off";
      pick.append(o);
      pick.disabled = true;
      pick.title = off;
      label.title = off;
      label.append(pick);
      rows.push(label);
      continue;
    }
    const current = typeof rule === "string" ? rule : rule ? "patterns" : "allow";
    for (const value of ["allow", "ask", "deny", ...(current === "patterns" ? ["patterns"] : [])]) {
      const o = el("option", "", value === "patterns" ? "by pattern" : value);
      o.value = value;
      o.selected = value === current;
      pick.append(o);
    }
    pick.addEventListener("change", () => setPermission(tool, pick.value));
    label.append(pick);
    rows.push(label);
  }
  box.replaceChildren(...rows);
}

async function setPermission(tool, value) {
  if (value === "patterns") return;
  showError("");
  try {
    const rules = { ...(currentSession().permissions || {}), [tool]: value };
    setSession(await call("PATCH", api("/"), { permissions: rules }));
    renderPermissions();
  } catch (err) { showError(err.message); }
}

// -- the remaining budget ------------------------------------------------------------------
const BUDGET_WORDS = {
  tokens_per_day: (q) => `${fmt(q.remaining)} of ${fmt(q.limit)} tokens left today`,
  cost_per_month: (q) => `$${q.remaining.toFixed(2)} of $${q.limit.toFixed(2)} left this month`,
  runs_per_minute: (q) => `${fmt(q.remaining)} of ${fmt(q.limit)} runs left this minute`,
  concurrent_runs: (q) => `${fmt(q.remaining)} of ${fmt(q.limit)} runs at once`,
};

function fmt(n) {
  return Number(n).toLocaleString("en");
}

export async function loadBudget() {
  // The limits the deployment sets on the user (a quota per user or group), what is left of
  // each and when it comes back: shown only where a limit is set.
  const box = document.getElementById("budget");
  const data = await call("GET", "/api/usage/quota/").catch(() => null);
  if (!data) return;
  const lines = [];
  let low = false;
  for (const [name, words] of Object.entries(BUDGET_WORDS)) {
    const q = data.quotas[name];
    if (!q || q.limit === null || q.remaining === null) continue;
    let line = words(q);
    if (q.remaining <= 0 && q.resets_at) line += ` (back ${when(q.resets_at)})`;
    if (q.limit && q.remaining / q.limit < 0.2) low = true;
    lines.push(line);
  }
  box.textContent = lines.length ? `Your budget: ${lines.join(" · ")}` : "";
  box.classList.toggle("low", low);
  box.hidden = !lines.length;
}

// -- the listeners -----------------------------------------------------------------------------
export function initControls() {
  subscribe("status", () => {
    showBadge();
    updateControls();
  });
  document.getElementById("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    sendPrompt(LIVE.includes(currentStatus()) ? "enqueue" : undefined);
  });
  document.getElementById("interrupt").addEventListener("click", () => sendPrompt("interrupt"));
  document.getElementById("rollback").addEventListener("click", rollback);
  document.getElementById("fork-session").addEventListener("click", () => forkAt(null));
  document.getElementById("model-picker").addEventListener("change", async (e) => {
    showError("");
    try {
      setSession(await call("PATCH", api("/"), { model: e.target.value }));
    } catch (err) {
      showError(err.message);
      renderModelPicker();
    }
  });
  document.getElementById("compact").addEventListener("click", async () => {
    showError("");
    document.getElementById("session-menu").open = false;
    await call("POST", api("/compact/"), {}).catch((err) => showError(err.message));
  });
  document.getElementById("prompt").addEventListener("keydown", (e) => {
    // Enter (or Ctrl/⌘+Enter) sends; Shift+Enter makes a new line. An Enter that confirms an
    // input method's composition (Japanese, Chinese…) is the composition's, not a send.
    if (e.key !== "Enter" || e.isComposing || e.keyCode === 229 || e.shiftKey || e.altKey) return;
    e.preventDefault();
    document.getElementById("composer").requestSubmit();
  });
  document.getElementById("resume").addEventListener("click", async () => {
    showError("");
    try {
      await call("POST", api("/runs/"), { mode: "resume" });
      notice("Resumed: the answer goes on from where it stopped.");
    } catch (err) { showError(err.message); }
  });
  document.getElementById("stop").addEventListener("click", async () => {
    await call("POST", api("/abort/"), {}).catch((err) => showError(err.message));
  });
}
