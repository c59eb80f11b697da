// Drawing the conversation. Rendering is incremental: every message and part carries a
// version; a render (at most one a frame) rebuilds only the messages whose version, or what
// their look depends on, changed, and a streaming text part grows in place (parts.js). Only
// the newest messages are kept: older ones are dropped (while the reader is at the bottom) and
// come back a page at a time when the reader scrolls up, so a long session costs the same as
// a short one.
import { showError } from "./api.js";
import { el } from "./dom.js";
import {
  clearChanges, currentStatus, getMessage, getPart, globalVersion, hasMessage, isStructural,
  lastAnswerId, markStructural, olderPageLink, onForget, pathIds, revertedIds, setSession,
  streamingIds, trimOlder,
} from "./store.js";
import { partNode } from "./parts.js";
import {
  editForm, forgetActionBar, isEditing, laterBranch, messageActions, renderContinueBar,
  renderRevertBar,
} from "./moves.js";
import { loadOlder } from "./sync.js";
import { updateControls } from "./controls.js";
import { renderSource } from "../repository.js";
import { askNode } from "../alternatives.js";

const msgNodes = new Map(); // message id -> {key, node}
onForget((kind, id) => {
  if (kind === "all") msgNodes.clear();
  else if (kind === "message") msgNodes.delete(id);
});

export function showSession(next) {
  // The session as the server says: kept, and its source line drawn (repository.js).
  setSession(next);
  if (next) renderSource(next);
}

let frame = 0;
let stickToEnd = true; // the next render scrolls to the end (the first one, a reload)

export function scrollToEndNext() {
  stickToEnd = true;
}

export function render() {
  markStructural();
  if (!frame) frame = requestAnimationFrame(() => flush(true));
}

// A stream is drawn at most every STREAM_MS: ten updates a second read as smooth, and each
// costs a layout and a paint, whatever the number of words it brings.
const STREAM_MS = 80;
let lastStreamDraw = 0;
let streamTimer = 0;

export function renderStream() {
  if (frame || streamTimer) return;
  const wait = STREAM_MS - (performance.now() - lastStreamDraw);
  if (wait <= 0) {
    frame = requestAnimationFrame(() => flush(true));
    return;
  }
  streamTimer = setTimeout(() => {
    streamTimer = 0;
    if (!frame && (streamingIds().size || isStructural())) frame = requestAnimationFrame(() => flush(true));
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

// Whether the reader is at the end of the conversation (the pane that scrolls; the message
// box stays in sight below it), read when the pane scrolls: reading the scroll position in
// every render would force a layout each time.
let readerAtEnd = true;

export function initRender() {
  document.getElementById("messages").addEventListener("scroll", (e) => {
    const pane = e.currentTarget;
    readerAtEnd = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 160;
  }, { passive: true });
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
  if (frame) { cancelAnimationFrame(frame); frame = 0; }
  lastStreamDraw = performance.now();
  const stick = follow && (stickToEnd || readerAtEnd);
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
  if (stick) trimOlder();
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
  stickToEnd = false;
  const scroller = document.getElementById("messages");
  scroller.scrollTop = scroller.scrollHeight;
}

function messageNode(m, dim, isLastAnswer) {
  const spent = lastOfRun.get(m.id) || "";
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
  else if (m.error && m.error.message) {
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
  // after a resume closed it with the seed's "not completed before recovery" (kept in the
  // data, shown as its title).
  if (m.role !== "assistant") return null;
  const recovered = m.error?.reason === "UnfinishedAssistantMessage";
  const live = currentStatus() === "busy" || currentStatus() === "waiting";
  if (!recovered && (m.completed_at || m.error || live || !m.partIds.length)) return null;
  const note = el("div", "msg-note stopped", "Stopped");
  note.title = recovered ? m.error.message : "The answer was stopped here; Resume answers again.";
  return note;
}

let lastOfRun = new Map(); // message id -> the usage line of the run it ends

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
  lastOfRun = new Map();
  for (const r of runs.values()) {
    if (!r.input && !r.output) continue;
    const cost = r.cost ? ` · $${r.cost.toFixed(r.cost < 0.01 ? 5 : 2)}` : "";
    const cached = r.cached ? ` (${r.cached} cached)` : "";
    lastOfRun.set(r.last, `run: ${r.input} tokens in${cached} · ${r.output} out${cost}`);
  }
}
