// What the chat knows of the session it shows: the session itself and its status, the
// messages and parts of the active path (the newest KEEP at most, in order), the branches and
// checkpoints the shown messages need, and the versions a render compares. Only the functions
// here change it; the other modules read it through the getters.
//
// Every message and part carries a version (v); `globalV` is bumped by what every message's
// look depends on (status, tree, revert). `structural` says something other than streamed
// text changed (the next render looks at every message); `streaming` holds the messages whose
// text or output grew since the last render.
import { api } from "./api.js";

const KEEP = 200; // messages kept in memory and in the page; past it the oldest go
export const LIVE = ["busy", "waiting"]; // statuses in which a run holds the session

let messages = new Map(); // id -> {id, role, parent_id, completed_at, error, partIds: [], v}
let parts = new Map(); // id -> part (with its version v)
let order = []; // message ids of the active path (the newest KEEP at most), in order
let session = null; // the session as the API shows it (status, revert, summary)
let status = "idle"; // the status shown (the badge, the controls)
let offline = false; // the socket is down: nobody can know the status
let children = new Map(); // parent id ("" for roots) -> visible child ids, oldest first
let checkpoints = new Map(); // message id -> {run_id, index, kind, run_status}
// The path comes a page at a time: the page nearest the head first; `olderPage` is the link
// to the page before the oldest one shown, loaded when the reader scrolls up to it.
let olderPage = null;
let seq = 0; // versions of messages and parts
let globalV = 0; // bumped by what every message's look depends on (status, tree, revert)
const streaming = new Set(); // messages whose text or output grew since the last render
let structural = true; // something else changed: the next render looks at every message

// What the page drew of dropped messages and parts goes with them: the drawing modules say
// here how to forget it (kind "part" or "message" with its id, or "all").
const forgetters = [];

export function onForget(fn) {
  forgetters.push(fn);
}

function forgotten(kind, id) {
  for (const fn of forgetters) fn(kind, id);
}

// -- reading -------------------------------------------------------------------------------
export function currentSession() { return session; }
export function currentStatus() { return status; }
export function isOffline() { return offline; }
export function getMessage(id) { return messages.get(id); }
export function hasMessage(id) { return messages.has(id); }
export function getPart(id) { return parts.get(id); }
export function pathIds() { return order; } // not to be changed by the caller
export function childrenOf(id) { return children.get(id || "") || []; }
export function checkpointOf(id) { return checkpoints.get(id); }
export function olderPageLink() { return olderPage; }
export function globalVersion() { return globalV; }
export function isStructural() { return structural; }
export function streamingIds() { return streaming; }

// -- the session -----------------------------------------------------------------------------
export function setSession(next) {
  // The session as the server says; what every message shows of it (the revert) re-renders.
  if (JSON.stringify(session?.revert ?? null) !== JSON.stringify(next?.revert ?? null)) globalV++;
  session = next;
}

export function setSessionStatus(next) {
  if (session) session.status = next;
}

export function setStatus(next) {
  if (next !== status) globalV++;
  status = next;
}

export function setOfflineFlag(on) {
  offline = on;
}

export function forgetSession() {
  // Another session opens in place: nothing of this one is kept.
  session = null;
  forgetAll();
  children = new Map();
  checkpoints = new Map();
  olderPage = null;
  globalV++;
}

// -- what changed since the last render ------------------------------------------------------
export function markStructural() {
  structural = true;
}

export function clearChanges() {
  structural = false;
  streaming.clear();
}

// -- messages and parts --------------------------------------------------------------------
export function upsertMessage(m) {
  const known = messages.get(m.id);
  const entry = known || { partIds: [] };
  Object.assign(entry, {
    id: m.id, role: m.role, parent_id: m.parent_id, completed_at: m.completed_at,
    error: m.error, run_id: m.run_id, tokens: m.tokens || {}, v: ++seq,
  });
  messages.set(m.id, entry);
  if (!order.includes(m.id)) order.push(m.id);
  for (const p of m.parts || []) upsertPart(p, false);
}

export function upsertPart(p, fromFetch) {
  const known = parts.get(p.id);
  if (known && fromFetch && typeof known.text === "string" && typeof p.text === "string"
      && known.text.length > p.text.length) {
    p = { ...p, text: known.text }; // live deltas are ahead of the stored text
  }
  if (known && typeof known.state?.output === "string" && p.state
      && ["running", "pending"].includes(p.state.status)
      && known.state.output.length > (p.state.output || "").length) {
    p = { ...p, state: { ...p.state, output: known.state.output } }; // live output is ahead
  }
  parts.set(p.id, { ...(known || {}), ...p, textCount: undefined, outputCount: undefined, v: ++seq });
  let msg = messages.get(p.message_id);
  if (!msg) {
    msg = { id: p.message_id, role: "assistant", partIds: [], v: ++seq };
    messages.set(msg.id, msg);
    order.push(msg.id);
  }
  if (!msg.partIds.includes(p.id)) {
    msg.partIds.push(p.id);
    msg.partIds.sort((a, b) => (parts.get(a).order ?? 0) - (parts.get(b).order ?? 0));
    msg.v = ++seq;
  }
}

// A delta says "grew" (the text grew), "gap" (text before it was never received: the caller
// reads the path again), or nothing (already had it).
export function applyDelta(ev) {
  let part = parts.get(ev.part_id);
  if (!part) {
    if (ev.offset !== 0) return "gap";
    upsertPart({ id: ev.part_id, message_id: ev.message_id, order: 999,
      type: ev.type === "reasoning-delta" ? "reasoning" : "text", text: "" });
    part = parts.get(ev.part_id);
    structural = true; // a new part (perhaps a new message): the next render looks at all
  }
  // Offsets count characters (code points, as the server does), not UTF-16 units: an
  // emoji is one character there and two units in a JS string.
  const have = part.text || "";
  const haveCount = part.textCount ?? codePoints(have);
  const added = [...ev.text];
  if (ev.offset > haveCount) return "gap";
  if (ev.offset + added.length <= haveCount) return; // already have it
  part.text = have + added.slice(haveCount - ev.offset).join("");
  part.textCount = ev.offset + added.length;
  part.v = ++seq;
  streaming.add(part.message_id);
  return "grew";
}

export function applyToolOutput(ev) {
  // A running tool's output, framed like text deltas: offsets in code points.
  const part = parts.get(ev.part_id);
  if (!part) return "gap";
  const state = (part.state = { ...(part.state || {}) });
  // Only a running call prints: its "running" may have gone by while the path was read again
  // (the read found it pending: running is said live, stored with the output later).
  if (state.status === "pending") state.status = "running";
  const have = state.output || "";
  const haveCount = part.outputCount ?? codePoints(have);
  const added = [...ev.text];
  if (ev.offset > haveCount) return "gap";
  if (ev.offset + added.length <= haveCount) return;
  state.output = have + added.slice(haveCount - ev.offset).join("");
  part.outputCount = ev.offset + added.length;
  part.v = ++seq;
  streaming.add(part.message_id);
  return "grew";
}

function codePoints(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

export function removeMessage(id) {
  messages.delete(id);
  order = order.filter((known) => known !== id);
}

export function removePart(messageId, partId) {
  parts.delete(partId);
  const m = messages.get(messageId);
  if (m) { m.partIds = m.partIds.filter((id) => id !== partId); m.v = ++seq; }
}

export function setWholePart(partId, whole) {
  // A part the list cut, as the reader asked for it whole.
  parts.set(partId, { ...parts.get(partId), ...whole, truncated: false, v: ++seq });
}

// -- what the database holds -----------------------------------------------------------------
export function stable(value) {
  // JSON with the keys of objects sorted: two equal objects give the same text.
  return JSON.stringify(value, (k, v) => (v && typeof v === "object" && !Array.isArray(v)
    ? Object.fromEntries(Object.keys(v).sort().map((key) => [key, v[key]])) : v));
}

function messageDiffers(known, m) {
  const look = (x) => stable([x.role, x.parent_id, x.completed_at, x.error, x.run_id, x.tokens || {}]);
  return look(known) !== look(m);
}

function partDiffers(known, p, merge) {
  if (p.truncated && known.truncated === false) return false; // the reader asked for it whole
  for (const [key, value] of Object.entries(p)) {
    if (merge && key === "text" && typeof known.text === "string" && typeof value === "string"
        && known.text.startsWith(value)) continue; // live deltas are ahead of the stored text
    if (merge && key === "state" && known.state && value) {
      const { output: a, ...restKnown } = known.state;
      const { output: b, ...restStored } = value;
      if (stable(restKnown) === stable(restStored) && (a || "").startsWith(b || "")) continue;
    }
    if (stable(known[key]) !== stable(value)) return true;
  }
  return false;
}

function dropMessage(id) {
  const m = messages.get(id);
  for (const pid of m ? m.partIds : []) { parts.delete(pid); forgotten("part", pid); }
  messages.delete(id);
}

export function applyStored(page, exact, keep) {
  // Whether anything shown changed. Only what differs gets a new version (and is drawn again).
  const list = page.results;
  const ids = list.map((m) => m.id);
  const start = ids.length ? order.indexOf(ids[0]) : 0;
  if (start < 0) {
    // The stored path does not meet what is shown (another branch): shown as a reload shows it.
    if (exact) { forgetAll(); olderPage = page.previous; }
    const added = addPage(list);
    if (exact) order = added;
    return true;
  }
  let changed = false;
  const stored = new Set(ids);
  for (const m of list) {
    const known = messages.get(m.id);
    if (!known || messageDiffers(known, m)) { upsertMessage({ ...m, parts: [] }); changed = true; }
    for (const p of m.parts) {
      const merge = !exact || keep.has(p.id);
      const kp = parts.get(p.id);
      if (kp && !partDiffers(kp, p, merge)) continue;
      if (!merge) parts.delete(p.id); // replaced by the stored part, not merged with it
      upsertPart(p, merge);
      changed = true;
    }
    if (!exact) continue;
    // The parts as stored, in their order; those the database does not hold (streamed,
    // never stored) go.
    const msg = messages.get(m.id);
    const have = new Set(m.parts.map((p) => p.id));
    for (const pid of msg.partIds) {
      if (!have.has(pid) && !keep.has(pid)) { parts.delete(pid); forgotten("part", pid); }
    }
    const next = [...have, ...msg.partIds.filter((pid) => !have.has(pid) && keep.has(pid))];
    if (next.join() !== msg.partIds.join()) { msg.partIds = next; msg.v = ++seq; changed = true; }
  }
  if (exact) {
    const after = order.slice(start).filter((id) => !stored.has(id));
    for (const id of after) if (!keep.has(id)) dropMessage(id);
    const next = [...order.slice(0, start), ...ids, ...after.filter((id) => keep.has(id))];
    if (next.join() !== order.join()) { order = next; changed = true; }
  }
  return changed;
}

// -- paging ----------------------------------------------------------------------------------
function addPage(list) {
  for (const m of list) {
    upsertMessage({ ...m, parts: [] });
    for (const p of m.parts) upsertPart(p, true);
  }
  return list.map((m) => m.id);
}

export function readPage(page, merge, older) {
  // A page read anew (all else forgotten; `older`: the link to the page before it) or merged.
  if (!merge) { forgetAll(); olderPage = older; }
  const ids = addPage(page.results);
  if (!merge) order = ids;
}

export function addOlderPage(page) {
  const ids = addPage(page.results);
  order = [...ids, ...order.filter((id) => !ids.includes(id))];
  olderPage = page.previous;
}

function forgetAll() {
  messages = new Map();
  parts = new Map();
  order = [];
  forgotten("all");
}

export function trimOlder() {
  // Past KEEP messages the oldest are forgotten (the reader is at the bottom), so a long
  // session holds as much as a short one: the "earlier messages" link brings them back a
  // page at a time.
  if (order.length <= KEEP) return;
  const dropped = order.slice(0, order.length - KEEP);
  order = order.slice(order.length - KEEP);
  for (const id of dropped) {
    const m = messages.get(id);
    for (const pid of m ? m.partIds : []) { parts.delete(pid); forgotten("part", pid); }
    messages.delete(id);
    forgotten("message", id);
  }
  olderPage = api(`/messages/?before=${encodeURIComponent(order[0])}`);
}

// -- the tree --------------------------------------------------------------------------------
export function setTree(tree, timeline) {
  // Only what the shown messages need (their siblings, the head's children, their
  // checkpoints) is kept: the whole tree of a long session would grow with every reply.
  const shown = new Set(order);
  const parents = new Set([""]);
  for (const id of order) parents.add(messages.get(id)?.parent_id || "");
  if (session?.head_message_id) parents.add(session.head_message_id);
  children = new Map();
  for (const m of tree) {
    const key = m.parent_id || "";
    if (m.hidden || !parents.has(key)) continue;
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(m.id);
  }
  checkpoints = new Map();
  for (const c of timeline) if (!c.hidden && shown.has(c.message_id)) checkpoints.set(c.message_id, c);
  globalV++;
  structural = true;
}

// -- questions about the path ------------------------------------------------------------------
export function textOf(m) {
  return m ? m.partIds.map((id) => parts.get(id)).filter((p) => p && p.type === "text").map((p) => p.text).join("") : "";
}

export function lastAnswerId() {
  for (let i = order.length - 1; i >= 0; i--) {
    const m = messages.get(order[i]);
    if (m && m.role === "assistant") return m.id;
    if (m && m.role === "user") return null;
  }
  return null;
}

export function revertedIds() {
  // What a pending revert covers: messages from the boundary on, or, for a part boundary,
  // that message's parts from the part on and every later message.
  const dim = new Set();
  const r = session && session.revert;
  if (!r) return dim;
  const at = order.indexOf(r.message_id);
  if (at < 0) return dim;
  order.forEach((id, i) => {
    if (i > at || (i === at && !r.part_id)) dim.add(id);
  });
  if (r.part_id) {
    const m = messages.get(r.message_id);
    const cut = parts.get(r.part_id);
    for (const pid of m ? m.partIds : []) {
      if (cut && (parts.get(pid).order ?? 0) >= (cut.order ?? 0)) dim.add(pid);
    }
  }
  return dim;
}

export function lastTurnUnfinished() {
  // The last message of the path is a user message with no answer yet, or an assistant
  // message that was not completed or has tools that never finished.
  const last = messages.get(order[order.length - 1]);
  if (!last) return false;
  // The clone or upload a session started from is a history event, not a prompt to answer.
  if (last.role === "user" && last.partIds.some((id) => parts.get(id)?.source)) return false;
  if (last.role === "user") return true;
  if (!last.completed_at) return true;
  if (last.role === "assistant" && last.error) return true; // cut short: resume goes on
  return last.partIds.some((id) => {
    const p = parts.get(id);
    return p.type === "tool" && ["pending", "running"].includes((p.state || {}).status);
  });
}
