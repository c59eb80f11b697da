// Drawing the conversation. Rendering is incremental: every message and part carries a
// version; a render (at most one a frame) rebuilds only the messages whose version, or what
// their look depends on, changed, and a streaming text part grows in place (parts.js). Only
// the newest messages are kept: older ones are dropped (while the reader is at the bottom) and
// come back a page at a time when the reader scrolls up, so a long session costs the same as
// a short one. Whoever changed something asks for a render through the store (`redraw`).
import { api, call, showError } from "./api.js";
import { el } from "./dom.js";
import {
  addOlderPage, clearChanges, currentSessionId, currentStatus, getMessage, getPart,
  globalVersion, hasMessage, isStructural, lastAnswerId, markStructural, olderPageLink, pathIds,
  revertedIds, streamingIds, subscribe, trimOlder, viewState as view,
} from "./store.js";
import { refreshTree } from "./sync.js";
import { askNode } from "../alternatives.js";
import {
  editForm, forgetActionBar, isEditing, laterBranch, messageActions, renderContinueBar,
  renderRevertBar,
} from "./moves.js";
import { partNode } from "./parts.js";
import { updateControls } from "./controls.js";

const msgNodes = new Map(); // message id -> {key, node}
subscribe("forget", (kind, id) => {
  if (kind === "all") msgNodes.clear();
  else if (kind === "message") msgNodes.delete(id);
});

function render() {
  // Something changed (the store's "redraw"): drawn on the next frame, once however often asked.
  markStructural();
  if (!view.frame) view.frame = requestAnimationFrame(() => flush(true));
}

// A stream is drawn at most every STREAM_MS: ten updates a second read as smooth, and each
// costs a layout and a paint, whatever the number of words it brings.
const STREAM_MS = 80;

export function renderStream() {
  if (view.frame || view.streamTimer) return;
  const wait = STREAM_MS - (performance.now() - view.lastStreamDraw);
  if (wait <= 0) {
    view.frame = requestAnimationFrame(() => flush(true));
    return;
  }
  view.streamTimer = setTimeout(() => {
    view.streamTimer = 0;
    if (!view.frame && (streamingIds().size || isStructural())) view.frame = requestAnimationFrame(() => flush(true));
  }, wait);
}

function reconcile(parent, nodes) {
  // Make parent's children exactly `nodes`, moving only what is out of place (a node that
  // stays where it is keeps focus, selection and its open state).
  let cur = parent.firstChild;
  for (const n of nodes) {
    if (cur === n) { cur = cur.nextSibling; continue; }
    parent.insertBefore(n, cur);
  }
  while (cur) {
    const next = cur.nextSibling;
    parent.removeChild(cur);
    cur = next;
  }
}

export function initRender() {
  subscribe("redraw", render);
  // Whether the reader is at the end of the conversation (the pane that scrolls; the message
  // box stays in sight below it), read when the pane scrolls: reading the scroll position in
  // every render would force a layout each time.
  document.getElementById("messages").addEventListener("scroll", (e) => {
    const pane = e.currentTarget;
    view.readerAtEnd = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 160;
  }, { passive: true });
}

async function loadOlder() {
  if (!olderPageLink() || view.loadingOlder) return;
  view.loadingOlder = true;
  const sid = currentSessionId();
  try {
    const page = await call("GET", olderPageLink());
    if (sid !== currentSessionId()) return;
    addOlderPage(page);
    // Keep what the reader looks at in place while the older messages go in above it.
    const scroller = document.getElementById("messages");
    const fromBottom = scroller.scrollHeight - scroller.scrollTop;
    markStructural();
    flush(false);
    scroller.scrollTop = scroller.scrollHeight - fromBottom;
    refreshTree(); // the branches and checkpoints of the older messages
  } catch (err) {
    showError(err.message);
  } finally {
    view.loadingOlder = false;
  }
}

const olderObserver = new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting)) loadOlder();
});

const olderButton = (() => {
  const b = el("button", "secondary older", "Show earlier messages");
  b.type = "button";
  b.id = "load-older";
  b.addEventListener("click", loadOlder);
  return b;
})();

export function flush(follow) {
  if (view.frame) { cancelAnimationFrame(view.frame); view.frame = 0; }
  view.lastStreamDraw = performance.now();
  const stick = follow && (view.stickToEnd || view.readerAtEnd);
  if (!isStructural() && streamingIds().size) {
    // Only streamed text or output grew: those messages are rendered, nothing else is looked at.
    const dim = revertedIds();
    const lastAnswer = lastAnswerId();
    let same = true;
    for (const id of streamingIds()) {
      const m = getMessage(id);
      const before = msgNodes.get(id)?.node;
      if (m && messageNode(m, dim, id === lastAnswer) !== before) same = false;
    }
    clearChanges();
    if (same) {
      updateControls();
      if (stick) scrollToEnd();
      return;
    }
  }
  clearChanges();
  if (stick) trimOlder((id) => api(`/messages/?before=${encodeURIComponent(id)}`));
  usageLines();
  const box = document.getElementById("messages");
  const dim = revertedIds();
  const lastAnswer = lastAnswerId();
  const nodes = [];
  if (olderPageLink()) nodes.push(olderButton);
  for (const id of pathIds()) {
    const m = getMessage(id);
    if (!m) continue;
    const node = messageNode(m, dim, id === lastAnswer);
    if (node) nodes.push(node);
  }
  for (const id of msgNodes.keys()) if (!hasMessage(id)) { msgNodes.delete(id); forgetActionBar(id); }
  const later = laterBranch();
  if (later) nodes.push(later);
  reconcile(box, nodes);
  olderObserver.disconnect();
  if (olderPageLink()) olderObserver.observe(olderButton);
  renderContinueBar();
  renderRevertBar();
  updateControls();
  if (stick) scrollToEnd();
}

function scrollToEnd() {
  view.stickToEnd = false;
  const scroller = document.getElementById("messages");
  scroller.scrollTop = scroller.scrollHeight;
}

function messageNode(m, dim, isLastAnswer) {
  const spent = view.lastOfRun.get(m.id) || "";
  const dimmed = dim.has(m.id);
  let partsKey = "";
  for (const pid of m.partIds) partsKey += `${getPart(pid)?.v}${dim.has(pid) ? "d" : ""},`;
  const key = `${m.v}|${partsKey}|${dimmed}|${spent}|${isLastAnswer}|${globalVersion()}|${isEditing(m.id)}`;
  const known = msgNodes.get(m.id);
  if (known && known.key === key) return known.node;
  const div = known ? known.node : el("div");
  div.className = "msg " + m.role + (dimmed ? " reverted" : "");
  div.dataset.messageId = m.id;
  const kids = [];
  if (isEditing(m.id)) {
    kids.push(editForm(m));
  } else {
    for (const pid of m.partIds) {
      const part = getPart(pid);
      if (!part) continue;
      const node = partNode(part, m, dim.has(pid));
      if (node) kids.push(node);
    }
  }
  const note = stoppedNote(m);
  if (note) kids.push(note);
  else if (m.error && m.error.message && m.error.reason !== "UnfinishedAssistantMessage") {
    kids.push(el("div", "msg-error", m.error.message));
    // The model's error is shown here, in its message: not a second time above the box.
    if (document.getElementById("error").textContent === m.error.message) showError("");
  }
  if (spent) kids.push(el("div", "usage muted", spent));
  if (!kids.length) {
    msgNodes.delete(m.id);
    return null;
  }
  const actions = messageActions(m, isLastAnswer);
  if (actions) kids.push(actions);
  const ask = askNode(m.id); // an open "how many alternatives" form stays through a render
  if (ask) kids.push(ask);
  reconcile(div, kids);
  msgNodes.set(m.id, { key, node: div });
  return div;
}

function stoppedNote(m) {
  // A stopped answer says so, quietly: while it is left unfinished (Stop, a crash), and
  // after a resume closed it with "not completed before recovery" (docs/semantics.md §1.5;
  // kept in the data, shown as its title).
  if (m.role !== "assistant") return null;
  const recovered = m.error?.reason === "UnfinishedAssistantMessage";
  const live = currentStatus() === "busy" || currentStatus() === "waiting";
  if (!recovered && (m.completed_at || m.error || live || !m.partIds.length)) return null;
  // A resumed step's tool cards say what became of each call (run again, or interrupted):
  // the step itself went on, so no "Stopped" under it (a stopped answer is continued,
  // docs/semantics.md §1.12).
  if (recovered && m.partIds.some((pid) => getPart(pid)?.type === "tool")) return null;
  const note = el("div", "msg-note stopped", "Stopped");
  note.title = recovered ? m.error.message : "The answer was stopped here; Resume goes on from here.";
  return note;
}

function usageLines() {
  // Per run: the tokens and cost of its model calls (each assistant message records its
  // call's), shown under the run's last message on the path.
  const runs = new Map();
  for (const id of pathIds()) {
    const m = getMessage(id);
    if (!m || m.role !== "assistant" || !m.run_id) continue;
    const t = m.tokens || {};
    const r = runs.get(m.run_id) || { last: id, input: 0, output: 0, cached: 0, cost: 0 };
    r.last = id;
    r.input += t.input_tokens || 0;
    r.output += t.output_tokens || 0;
    r.cached += t.cached_input_tokens || 0;
    r.cost += t.cost_usd || 0;
    runs.set(m.run_id, r);
  }
  view.lastOfRun = new Map();
  for (const r of runs.values()) {
    if (!r.input && !r.output) continue;
    const cost = r.cost ? ` · $${r.cost.toFixed(r.cost < 0.01 ? 5 : 2)}` : "";
    const cached = r.cached ? ` (${r.cached} cached)` : "";
    view.lastOfRun.set(r.last, `run: ${r.input} tokens in${cached} · ${r.output} out${cost}`);
  }
}
