// The chat view: subscribe first, then load the conversation over the API, then apply live
// events. Text deltas carry their part id and offset, so text is neither lost nor doubled:
// a delta that starts past what we have is a gap (text not yet fetched) and triggers a
// refetch; one that ends before it is a duplicate and is dropped.
//
// Every event says which event of the session came before it (`prev`, the `seq` of that one):
// when that is not the last one applied, events were missed, and the chat reads again what
// the database holds. So it does after a reconnect, and once when a run ends: streamed text
// that was never stored (its worker crashed) goes, and what is shown is what a reload shows.
// Only what differs from the stored state is drawn again, and the scroll position stays.
//
// Rendering is incremental: every message and part carries a version; a render (at most one
// a frame) rebuilds only the messages whose version, or what their look depends on, changed,
// and a streaming text part grows in place (renderInto keeps its finished blocks). Only the
// newest messages are kept: older ones are dropped (while the reader is at the bottom) and
// come back a page at a time when the reader scrolls up, so a long session costs the same as
// a short one.
import { renderInto } from "./markdown.js";
import {
  closeViewers, ctx, el, initShare, loadChanges, loadFiles, loadLineage, loadShare, when,
} from "./panels.js";
import { initSidebar, markCurrent } from "./sidebar.js";
import { compareButton } from "./compare.js";
import { alternativesButton, initAlternatives } from "./alternatives.js";
import { initRepository, renderSource, showPrepare } from "./repository.js";
import { hideFilesRewound, showFilesRewound, withRewindModes } from "./rewind.js";
import { closeDrawers, initDrawers } from "./drawers.js";
import { roving } from "./roving.js";

const root = document.getElementById("chat");
let sessionId = root.dataset.sessionId;
const api = (path) => `/api/sessions/${sessionId}${path}`;
const KEEP = 200; // messages kept in memory and in the page; past it the oldest go

let messages = new Map(); // id -> {id, role, parent_id, completed_at, error, partIds: [], v}
let parts = new Map(); // id -> part (with its version v)
let order = []; // message ids of the active path (the newest KEEP at most), in order
let session = null; // the session as the API shows it (status, revert, summary)
let ready = false;
let buffered = [];
let refetchTimer = null;
let lastSeq = null; // `seq` of the last event of the session applied (null: none on this socket)
let children = new Map(); // parent id ("" for roots) -> visible child ids, oldest first
let checkpoints = new Map(); // message id -> {run_id, index, kind, run_status}
const openTools = new Set(); // tool cards the user opened (kept across renders)
let continueFrom = null; // {run_id, index, message_id} while "continue from here" is armed
const editing = new Map(); // user message id -> the text being edited
let revertPrompt = null; // what a revert put into the prompt box (an unrevert takes it out)
let seq = 0; // versions of messages and parts
let globalV = 0; // bumped by what every message's look depends on (status, tree, revert)
let regenerating = null; // {runId, before: text} while a regenerate is asked for
const streaming = new Set(); // messages whose text or output grew since the last render
let structural = true; // something else changed: the next render looks at every message

function csrf() {
  const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

const UNREACHABLE = "The server cannot be reached right now; the chat reconnects by itself.";

async function call(method, path, body) {
  return answer(fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  }));
}

// The newest page the chat reads when it opens: a screenful and more (older pages come as the
// reader scrolls up), not the API's default 50 to lay out before the last one shows.
const FIRST_PAGE = 20; // as static/early.js asks

function firstRead(kind, otherwise) {
  // The chat's first reads were asked by static/early.js while the modules loaded: their
  // answers serve the first start() of that session, once; anything else asks anew.
  const early = window.__firstRead;
  const pending = early && early.sid === sessionId ? early[kind] : null;
  if (!pending) return otherwise();
  early[kind] = null;
  return answer(pending);
}

async function answer(pending) {
  let res;
  try {
    res = await pending;
  } catch {
    // No answer at all (the browser says only "Failed to fetch"): the socket may not have
    // noticed yet (a dropped network keeps it "open" for minutes), so it is tried again.
    suspectConnection();
    throw new Error(UNREACHABLE);
  }
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) throw new Error(localTimes(data?.error?.message || `HTTP ${res.status}`, data?.error?.resets_at));
  return data;
}

function localTimes(message, resetsAt) {
  // A refusal names its time in UTC, for every client; the chat says it as the budget line
  // does (the browser's locale, the zone named).
  if (!resetsAt) return message;
  return message.replace(/(\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2} UTC/, when(resetsAt));
}

function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text || "";
  box.hidden = !text;
}

function notice(text) {
  // A passing word (a regenerate that came out the same): shown a few seconds.
  const box = document.getElementById("notice");
  box.textContent = text;
  box.hidden = !text;
  clearTimeout(notice.timer);
  if (text) notice.timer = setTimeout(() => { box.hidden = true; }, 6000);
}

Object.assign(ctx, { api, call, showError });

function setSession(next) {
  // The session as the server says; what every message shows of it (the revert) re-renders.
  if (JSON.stringify(session?.revert ?? null) !== JSON.stringify(next?.revert ?? null)) globalV++;
  session = next;
  if (next) renderSource(next);
}

function upsertMessage(m) {
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

function upsertPart(p, fromFetch) {
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

function applyDelta(ev) {
  let part = parts.get(ev.part_id);
  if (!part) {
    if (ev.offset !== 0) return scheduleRefetch();
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
  if (ev.offset > haveCount) return scheduleRefetch();
  if (ev.offset + added.length <= haveCount) return; // already have it
  part.text = have + added.slice(haveCount - ev.offset).join("");
  part.textCount = ev.offset + added.length;
  part.v = ++seq;
  streaming.add(part.message_id);
  return true;
}

function applyToolOutput(ev) {
  // A running tool's output, framed like text deltas: offsets in code points.
  const part = parts.get(ev.part_id);
  if (!part) return scheduleRefetch();
  const state = (part.state = { ...(part.state || {}) });
  const have = state.output || "";
  const haveCount = part.outputCount ?? codePoints(have);
  const added = [...ev.text];
  if (ev.offset > haveCount) return scheduleRefetch();
  if (ev.offset + added.length <= haveCount) return;
  state.output = have + added.slice(haveCount - ev.offset).join("");
  part.outputCount = ev.offset + added.length;
  part.v = ++seq;
  streaming.add(part.message_id);
  return true;
}

function codePoints(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

function scheduleRefetch(delay = 250) {
  if (refetchTimer) return;
  refetchTimer = setTimeout(async () => {
    refetchTimer = null;
    try {
      await loadMessages(true);
    } catch {
      return scheduleRefetch(1000); // the server is away (a restart): try again
    }
    render();
  }, delay);
}

// -- what the database holds -------------------------------------------------------------
// A resync reads the session and the newest page of messages and shows them. "Exact" (when
// no run streams, or a run just ended): what the database does not hold goes and what it
// holds differently is replaced. While a run streams, the fetched state is merged (streamed
// text may be ahead of the stored text). Objects live events changed since the resync was
// asked for (a next run streaming already) are merged, not replaced.
const LIVE = ["busy", "waiting"];
let resyncTimer = null;
let resyncWanted = false;
let resyncFinal = false;
let touched = null; // ids live events changed since a resync was asked for ("session" too)

function scheduleResync(final = false, delay = 100) {
  resyncWanted = true;
  resyncFinal ||= final;
  touched ||= new Set();
  if (!resyncTimer) resyncTimer = setTimeout(runResync, delay);
}

async function runResync() {
  if (reloadTimer) { resyncTimer = setTimeout(runResync, 200); return; } // a reload is on: after it
  const sid = sessionId;
  while (resyncWanted) {
    resyncWanted = false;
    const final = resyncFinal;
    resyncFinal = false;
    const seen = touched;
    touched = new Set();
    let fresh, page;
    try {
      [fresh, page] = await Promise.all([call("GET", api("/")), call("GET", api("/messages/"))]);
    } catch {
      resyncWanted = true;
      resyncFinal ||= final;
      resyncTimer = setTimeout(runResync, 1000); // the server is away (a restart): try again
      return;
    }
    if (sid !== sessionId) break;
    for (const id of touched) seen.add(id);
    // No run holds the session: what it stored is all there is (live objects merged).
    const exact = final || !LIVE.includes(fresh.status);
    let changed = applyStored(page, exact, seen);
    if (!seen.has("session") && (stable(fresh) !== stable(session) || fresh.status !== currentStatus)) {
      // A session event was missed (its status, head or revert).
      setSession(fresh);
      setStatus(fresh.status);
      changed = true;
      if (fresh.head_message_id && !order.includes(fresh.head_message_id)) scheduleReload(0);
    }
    if (changed) render();
  }
  resyncTimer = null;
  touched = null;
}

function stable(value) {
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
  for (const pid of m ? m.partIds : []) { parts.delete(pid); partNodes.delete(pid); }
  messages.delete(id);
}

function applyStored(page, exact, keep) {
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
      if (!have.has(pid) && !keep.has(pid)) { parts.delete(pid); partNodes.delete(pid); }
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

let reloadTimer = null;
let reloadAgain = false; // asked for while the path was being fetched: it may have moved since
let missedEvents = false; // path events left out while the path was being fetched
function scheduleReload(delay = 100) {
  if (reloadTimer) { reloadAgain = true; return; }
  missedEvents = false;
  reloadTimer = setTimeout(async () => {
    reloadAgain = false;
    try {
      await loadMessages(false);
      await loadTree();
    } catch {
      reloadTimer = null;
      return scheduleReload(1000);
    }
    reloadTimer = null;
    render();
    if (reloadAgain) return scheduleReload(0);
    // The page may have been read before the events left out meanwhile (a slow answer, a
    // run that ended in the meantime): a merge refetch, asked for after them, has them.
    if (missedEvents || currentStatus === "busy") scheduleRefetch();
  }, delay);
}

// The path comes a page at a time: the page nearest the head first; `olderPage` is the link
// to the page before the oldest one shown, loaded when the reader scrolls up to it.
let olderPage = null;
let loadingOlder = false;

function addPage(list) {
  for (const m of list) {
    upsertMessage({ ...m, parts: [] });
    for (const p of m.parts) upsertPart(p, true);
  }
  return list.map((m) => m.id);
}

function forgetAll() {
  messages = new Map();
  parts = new Map();
  order = [];
  msgNodes.clear();
  partNodes.clear();
  actionBars.clear();
}

async function loadMessages(merge) {
  const sid = sessionId;
  const page = merge ? await call("GET", api("/messages/"))
    : await firstRead("messages", () => call("GET", api(`/messages/?limit=${FIRST_PAGE}`)));
  if (sid !== sessionId) return; // the sidebar switched sessions meanwhile
  if (!merge) { forgetAll(); olderPage = fullPages(page.previous); stickToEnd = true; }
  const ids = addPage(page.results);
  if (!merge) order = ids;
}

function fullPages(link) {
  // Older pages at the API's own size: only the first read is kept short.
  return link ? link.replace(/([?&])limit=\d+(&|$)/, (_, before, after) => (after ? before : "")) : link;
}

async function loadOlder() {
  if (!olderPage || loadingOlder) return;
  loadingOlder = true;
  const sid = sessionId;
  try {
    const page = await call("GET", olderPage);
    if (sid !== sessionId) return;
    const ids = addPage(page.results);
    order = [...ids, ...order.filter((id) => !ids.includes(id))];
    olderPage = page.previous;
    // Keep what the reader looks at in place while the older messages go in above it.
    const scroller = document.getElementById("messages");
    const fromBottom = scroller.scrollHeight - scroller.scrollTop;
    structural = true;
    flush(false);
    scroller.scrollTop = scroller.scrollHeight - fromBottom;
    refreshTree(); // the branches and checkpoints of the older messages
  } catch (err) {
    showError(err.message);
  } finally {
    loadingOlder = false;
  }
}

function trimOlder() {
  // Past KEEP messages the oldest are forgotten (the reader is at the bottom), so a long
  // session holds as much as a short one: the "earlier messages" link brings them back a
  // page at a time.
  if (order.length <= KEEP) return;
  const dropped = order.slice(0, order.length - KEEP);
  order = order.slice(order.length - KEEP);
  for (const id of dropped) {
    const m = messages.get(id);
    for (const pid of m ? m.partIds : []) { parts.delete(pid); partNodes.delete(pid); }
    messages.delete(id);
    msgNodes.delete(id);
    actionBars.delete(id);
  }
  olderPage = api(`/messages/?before=${encodeURIComponent(order[0])}`);
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

async function showWholePart(partId) {
  try {
    const whole = await call("GET", `/api/parts/${partId}/`);
    parts.set(partId, { ...parts.get(partId), ...whole, truncated: false, v: ++seq });
    render();
  } catch (err) { showError(err.message); }
}

async function loadTree() {
  const [tree, timeline] = await Promise.all([
    call("GET", api("/tree/")).catch(() => []),
    call("GET", api("/checkpoints/")).catch(() => []),
  ]);
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

let treeTimer = null;
function refreshTree() {
  clearTimeout(treeTimer);
  treeTimer = setTimeout(async () => { await loadTree(); render(); }, 150);
}

const PATH_EVENTS = new Set([
  "text-delta", "reasoning-delta", "message.updated", "message.part.updated",
  "message.removed", "message.part.removed",
]);

// A run in progress and no event for QUIET_MS: its last events may be lost (its worker was
// killed between storing them and publishing them; no later event will show a `prev` gap).
// Read the session again — once per quiet period.
const QUIET_MS = 10000;
let lastEventAt = Date.now();
setInterval(() => {
  if (!sessionId || !LIVE.includes(currentStatus) || resyncTimer) return;
  if (Date.now() - lastEventAt < QUIET_MS) return;
  lastEventAt = Date.now();
  scheduleResync();
}, 2000);

function noteSeq(ev) {
  lastEventAt = Date.now();
  // A `prev` other than the last `seq` applied: events were missed (or came out of order).
  if (ev.type === "subscribed") { lastSeq = null; return; }
  if (typeof ev.seq !== "number") return;
  if (touched) {
    for (const id of [ev.message_id, ev.part_id, ev.message?.id, ev.part?.id, ev.part?.message_id]) {
      if (id) touched.add(id);
    }
    if (ev.type.startsWith("session.")) touched.add("session");
  }
  if (lastSeq !== null && ev.prev !== undefined && ev.prev !== lastSeq) scheduleResync();
  lastSeq = lastSeq === null ? ev.seq : Math.max(lastSeq, ev.seq);
}

function handle(ev) {
  noteSeq(ev);
  // While the path is being reloaded its events are left out: the reload, or the merge
  // refetch after it, has them.
  if (reloadTimer && PATH_EVENTS.has(ev.type)) { missedEvents = true; return; }
  switch (ev.type) {
    // A delta only grows its message: the render after it looks at that message alone.
    case "text-delta":
    case "reasoning-delta":
      if (applyDelta(ev)) return renderStream();
      break;
    case "tool-output-delta":
      if (applyToolOutput(ev)) return renderStream();
      break;
    case "run.requires_action": break; // the parts' approval cards and session.status say it
    case "message.updated": {
      const m = ev.message;
      const tail = order.length ? order[order.length - 1] : null;
      if (!messages.has(m.id) && (m.parent_id || null) !== tail) {
        // A message that does not extend the path we show starts another branch (continue,
        // regenerate): the head moved, so show the path to it.
        scheduleReload();
        return;
      }
      upsertMessage(m);
      break;
    }
    case "message.part.updated": upsertPart(ev.part, false); break;
    case "message.removed":
      messages.delete(ev.message_id); order = order.filter((id) => id !== ev.message_id); break;
    case "message.part.removed": {
      parts.delete(ev.part_id);
      const m = messages.get(ev.message_id);
      if (m) { m.partIds = m.partIds.filter((id) => id !== ev.part_id); m.v = ++seq; }
      break;
    }
    case "session.status":
      unqueue(ev.run_id);
      // The status a run's start published may come after that run's end (it left another
      // process first): a run known ended holds nothing.
      if (ev.status !== "idle" && endedRuns.has(ev.run_id)) break;
      if (session) session.status = ev.status;
      setStatus(ev.status);
      break;
    case "session.prepare": showPrepare(ev); break;
    case "session.diff": loadFiles(); loadChanges(); break;
    case "session.updated": {
      // Older than the session held (a reply to this tab's own request came first): what it
      // says is out of date — a revert it does not know of would be taken back.
      if (olderThan(ev.session, session)) break;
      const moved = !session || session.head_message_id !== ev.session.head_message_id;
      const hadRevert = session?.revert;
      setSession(ev.session);
      if (hadRevert && !ev.session.revert) clearRevertPrompt();
      renderPermissions();
      renderModelPicker();
      if (ev.session.status === "idle" || !endedRuns.has(ev.session.busy_run_id)) setStatus(ev.session.status);
      const head = ev.session.head_message_id;
      if (moved && (!order.includes(head) || order[order.length - 1] !== head)) {
        // The head left the end of the path we show (rollback, a branch switch, continue,
        // regenerate; from this tab, another one or the admin): show the path to it. The
        // run that moved it may already stream: the reload, or its refetch, brings its events.
        scheduleReload(0);
      }
      break;
    }
    case "run.updated":
      if (ev.run.status !== "pending") unqueue(ev.run.id);
      if (!["completed", "cancelled", "error"].includes(ev.run.status) && endedRuns.delete(ev.run.id)) {
        scheduleResync(); // a run resumed: its status is read again, whatever came before
      }
      if (ev.run.status === "error" && ev.run.error) showRunError(ev.run.error.message);
      if (["completed", "cancelled", "error"].includes(ev.run.status)) {
        endedRuns.add(ev.run.id);
        // Everything the run stored is committed before this event: show exactly that.
        scheduleResync(true, 0);
        refreshTree();
        loadBudget();
        loadLineage(); // its cost per branch (own / inherited) moved
        if (regenerating && ev.run.mode === "regenerate") setTimeout(() => regenerateOutcome(ev.run.id), 400);
      }
      break;
    default: return;
  }
  render();
}

let currentStatus = "idle";
const endedRuns = new Set(); // runs whose end this tab saw (their late "busy" is stale)

function olderThan(next, held) {
  // By ``updated_at`` (ISO 8601, UTC, to the microsecond; no fraction when it is zero).
  if (!next?.updated_at || !held?.updated_at) return false;
  const at = (iso) => {
    const [whole, fraction = ""] = iso.replace("Z", "").split(".");
    return [Date.parse(whole + "Z"), Number(fraction.padEnd(6, "0"))];
  };
  const [a, b] = [at(next.updated_at), at(held.updated_at)];
  return a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
}

function setStatus(status) {
  if (status !== currentStatus) globalV++;
  currentStatus = status;
  showBadge();
  updateControls();
}

function showBadge() {
  const badge = document.getElementById("status");
  const shown = offline ? "offline" : currentStatus;
  badge.textContent = shown;
  badge.className = "badge " + shown;
}

function lastTurnUnfinished() {
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

function updateControls() {
  const busy = currentStatus === "busy";
  const waiting = currentStatus === "waiting";
  document.getElementById("stop").hidden = offline || (!busy && !waiting);
  document.getElementById("resume").hidden = offline || busy || waiting || !lastTurnUnfinished();
  // While a run goes on, a message is queued behind it (Enter, "Queue") or sent in its place
  // ("Interrupt and send"): the API's multitask strategies `enqueue` and `interrupt`.
  const live = (busy || waiting) && !continueFrom;
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

// -- parts ---------------------------------------------------------------------------------
const partNodes = new Map(); // part id -> {key, node}
const msgNodes = new Map(); // message id -> {key, node}

function toolLabel(p) {
  // What the card says of the call. A call left running or pending when the session is no
  // longer busy was stopped (Stop, a crash): it says so, not "running" beside an idle badge.
  const s = p.state || {};
  const meta = s.metadata || {};
  if (meta.interrupted) return { label: `interrupted (${meta.reason || "?"})`, cls: "stopped" };
  const live = currentStatus === "busy" || currentStatus === "waiting";
  if (!live && (s.status === "running" || (s.status === "pending" && s.approval?.status !== "requested"))) {
    return { label: "stopped", cls: "stopped" };
  }
  return { label: s.status || "", cls: s.status || "" };
}

function renderToolCard(p) {
  // A collapsible card: name, status and target in the summary; input and output inside.
  const box = el("details", "tool");
  box.dataset.partId = p.id;
  const s = p.state || {};
  if (openTools.has(p.id) || s.status === "running" || s.status === "error") box.open = true;
  const head = el("summary");
  // The user's choice (a click or Enter on the summary, before the card toggles) is kept;
  // a card opened because it runs closes again when it is done.
  head.addEventListener("click", () => {
    if (box.open) openTools.delete(p.id); else openTools.add(p.id);
  });
  const { label, cls } = toolLabel(p);
  head.append(el("span", "name", p.tool), el("span", "state " + cls, label));
  const input = s.input || {};
  head.append(el("span", "muted", input.path ?? input.command ?? (input.seconds !== undefined ? `${input.seconds}s` : "")));
  box.append(head);
  box.append(el("pre", "input", JSON.stringify(input, null, 1)));
  const approval = s.approval || {};
  if (s.status === "pending" && approval.status === "requested") {
    box.open = true;
    box.classList.add("asking");
    box.append(approvalCard(p, approval));
  } else if (approval.status && approval.by !== "rule") {
    box.append(el("p", "muted decision", approval.status === "denied"
      ? `Denied by you${approval.reason ? ": " + approval.reason : ""}` : "Allowed by you"));
  }
  // The output as it comes (a running shell), and what an interrupted call had printed.
  if (s.output) box.append(el("pre", "output" + (s.status === "running" ? " live" : ""), s.output));
  if (s.status === "error") box.append(el("pre", "error", s.error || "error"));
  return box;
}

function renderPartBody(p, role, reuse) {
  if (p.type === "text") {
    if (role !== "assistant") return el("div", "text", p.text); // people's words stay plain
    // Assistant text is Markdown, rendered safely; a growing text grows in place.
    const box = reuse && reuse.classList.contains("text") ? reuse : el("div", "text");
    renderInto(box, p.text || "");
    return box;
  }
  if (p.type === "reasoning") return el("div", "reasoning", p.text);
  if (p.type === "tool") return renderToolCard(p);
  if (p.type === "compaction") {
    // A divider that opens to the summary the model sees in place of the older messages.
    const box = el("details", "compaction");
    box.open = openTools.has(p.id); // kept open across renders once opened
    const head = el("summary", "", `Conversation compacted: ${p.replaced ?? "earlier"} messages summarised for the model`);
    head.addEventListener("click", () => {
      if (box.open) openTools.delete(p.id); else openTools.add(p.id);
    });
    box.append(head);
    const text = el("div", "text");
    renderInto(text, p.text || "");
    box.append(text);
    return box;
  }
  if (p.type === "patch") {
    const files = p.files || [];
    const more = files.length > 12 ? ` and ${(files.length - 12).toLocaleString()} more` : "";
    return el("div", "patch", "changed: " + files.slice(0, 12).join(", ") + more);
  }
  return null;
}

function partNode(p, m, dimmed) {
  const key = `${p.v}|${dimmed}|${p.type === "tool" ? currentStatus : ""}`;
  const known = partNodes.get(p.id);
  if (known && known.key === key) return known.node;
  // A streaming text part keeps its element (its finished blocks are not rendered again).
  const reuse = known && p.type === "text" && !p.truncated ? known.node : null;
  const node = renderPartBody(p, m.role, reuse);
  if (node) {
    node.classList.toggle("reverted", dimmed);
    if (p.truncated) {
      // Lists cut very long fields; the whole part is one click away.
      const more = el("button", "link show-whole", "Cut here — show all");
      more.type = "button";
      more.addEventListener("click", () => showWholePart(p.id));
      node.append(more);
    }
    if (p.type === "tool" && m.role === "assistant") {
      node.append(roving(revertButton(m.id, p.id), "Revert to this tool call"));
    }
  }
  partNodes.set(p.id, { key, node });
  return node;
}

const denyReasons = new Map(); // part id -> the reason being typed (kept across renders)

function approvalCard(p, approval) {
  // What will happen (the command, or the diff of the write) and the owner's three answers.
  const card = el("div", "approval");
  card.setAttribute("role", "group");
  card.setAttribute("aria-label", `Approve ${p.tool}`);
  card.append(el("strong", "", `The agent asks to run ${p.tool}`));
  if (approval.preview) card.append(el("pre", "preview", approval.preview));
  const runId = messages.get(p.message_id)?.run_id;
  const reason = el("input", "reason");
  reason.placeholder = "Reason (told to the agent when you deny)";
  reason.setAttribute("aria-label", "Reason for denying");
  reason.value = denyReasons.get(p.id) || "";
  reason.addEventListener("input", () => denyReasons.set(p.id, reason.value));
  const decide = async (decision) => {
    showError("");
    try {
      await call("POST", `/api/runs/${runId}/approve/`, {
        part_id: p.id, decision, reason: decision === "deny" ? reason.value : "",
      });
      denyReasons.delete(p.id);
    } catch (err) { showError(err.message); }
  };
  const row = el("div", "row");
  row.append(
    button("Allow", "Allow this call", () => decide("allow"), "allow"),
    button("Always", "Allow, and allow this exact call from now on in this session", () => decide("always"), "secondary always"),
    reason,
    button("Deny", "Deny this call; the agent reads your reason", () => decide("deny"), "secondary deny"),
  );
  card.append(row);
  return card;
}

function revertedIds() {
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

function revertButton(messageId, partId) {
  const b = el("button", "revert-here act", "↺ revert to here");
  b.type = "button";
  b.title = "Revert the conversation and the files to this point";
  b.setAttribute("aria-label", partId ? "Revert to this tool call" : "Revert to here");
  b.addEventListener("click", () => doRevert(messageId, partId));
  return withRewindModes(b, (mode) => doRevert(messageId, partId, mode), `${messageId}:${partId || ""}`);
}

function textOf(m) {
  return m ? m.partIds.map((id) => parts.get(id)).filter((p) => p && p.type === "text").map((p) => p.text).join("") : "";
}

async function doRevert(messageId, partId, mode = "both") {
  showError("");
  try {
    const body = { message_id: messageId };
    if (partId) body.part_id = partId;
    if (mode !== "both") body.mode = mode; // conversation | files (rewind.js)
    setSession(await call("POST", api("/revert/"), body));
    hideFilesRewound();
    if (mode === "files") {
      // The conversation stays; the files went back. Undo is an unrevert (rewind.js).
      showFilesRewound(session, { onUndone: (next) => { setSession(next); render(); loadFiles(); loadChanges(); } });
      render();
      loadFiles();
      loadChanges();
      return;
    }
    const boundary = messages.get(session.revert.message_id);
    if (boundary && boundary.role === "user" && !session.revert.part_id) {
      // Sending it again confirms the revert; an unrevert takes it out again.
      revertPrompt = textOf(boundary);
      document.getElementById("prompt").value = revertPrompt;
    }
    render();
    loadFiles();
    loadChanges();
  } catch (err) { showError(err.message); }
}

function clearRevertPrompt() {
  const prompt = document.getElementById("prompt");
  if (revertPrompt !== null && prompt.value === revertPrompt) prompt.value = "";
  revertPrompt = null;
}

async function revertMove(path) {
  showError("");
  try {
    setSession(await call("POST", api(path), {}));
    if (path === "/unrevert/") clearRevertPrompt();
    else revertPrompt = null;
    if (path === "/cleanup/") await loadMessages(false);
    render();
    loadFiles();
    loadChanges();
  } catch (err) { showError(err.message); }
}

function renderRevertBar() {
  const bar = document.getElementById("revert-bar");
  const r = session && session.revert;
  bar.hidden = !r;
  if (!r) return;
  if (bar.dataset.key === JSON.stringify(r)) return;
  bar.dataset.key = JSON.stringify(r);
  const changes = r.changes || [];
  const list = el("ul", "changes");
  for (const c of changes) {
    const li = el("li", "change " + c.status);
    li.append(el("code", "", c.file), el("span", "muted", `${c.status}${c.binary ? " (binary)" : ""} +${c.additions} −${c.deletions}`));
    list.append(li);
  }
  const head = el("div", "bar-head");
  const kept = r.mode === "conversation" && !changes.length;
  head.append(el("strong", "", kept ? "Reverted (conversation only)" : "Reverted"), el("span", "muted", kept
    ? "the files are left as they are — send a message to confirm"
    : `${changes.length} file(s) restored — send a message to confirm`));
  const left = r.not_kept && r.not_kept.count;
  const leftAlone = left
    ? el("p", "muted not-kept", `${left} file(s) the snapshots do not keep were left as they are: ` +
      r.not_kept.files.map((f) => `${f.path} (${f.reason})`).join(", ") + (left > r.not_kept.files.length ? " …" : ""))
    : null;
  const undo = el("button", "secondary", "Unrevert");
  undo.id = "unrevert";
  undo.type = "button";
  undo.addEventListener("click", () => revertMove("/unrevert/"));
  const confirm = el("button", "", "Confirm");
  confirm.id = "confirm-revert";
  confirm.type = "button";
  confirm.addEventListener("click", () => revertMove("/cleanup/"));
  head.append(undo, confirm);
  bar.replaceChildren(...[head, list, leftAlone].filter(Boolean));
}

let lastOfRun = new Map(); // message id -> the usage line of the run it ends

function usageLines() {
  // Per run: the tokens and cost of its model calls (each assistant message records its
  // call's), shown under the run's last message on the path.
  const runs = new Map();
  for (const id of order) {
    const m = messages.get(id);
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

// -- rendering -----------------------------------------------------------------------------
let frame = 0;
let stickToEnd = true; // the next render scrolls to the end (the first one, a reload)

function render() {
  structural = true;
  if (!frame) frame = requestAnimationFrame(() => flush(true));
}

// A stream is drawn at most every STREAM_MS: ten updates a second read as smooth, and each
// costs a layout and a paint, whatever the number of words it brings.
const STREAM_MS = 80;
let lastStreamDraw = 0;
let streamTimer = 0;

function renderStream() {
  if (frame || streamTimer) return;
  const wait = STREAM_MS - (performance.now() - lastStreamDraw);
  if (wait <= 0) {
    frame = requestAnimationFrame(() => flush(true));
    return;
  }
  streamTimer = setTimeout(() => {
    streamTimer = 0;
    if (!frame && (streaming.size || structural)) frame = requestAnimationFrame(() => flush(true));
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
document.getElementById("messages").addEventListener("scroll", (e) => {
  const pane = e.currentTarget;
  readerAtEnd = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 160;
}, { passive: true });

function flush(follow) {
  if (frame) { cancelAnimationFrame(frame); frame = 0; }
  lastStreamDraw = performance.now();
  const stick = follow && (stickToEnd || readerAtEnd);
  if (!structural && streaming.size) {
    // Only streamed text or output grew: those messages are rendered, nothing else is looked at.
    const dim = revertedIds();
    const lastAnswer = lastAnswerId();
    let same = true;
    for (const id of streaming) {
      const m = messages.get(id);
      const before = msgNodes.get(id)?.node;
      if (m && messageNode(m, dim, id === lastAnswer) !== before) same = false;
    }
    streaming.clear();
    if (same) {
      updateControls();
      if (stick) scrollToEnd();
      return;
    }
  }
  structural = false;
  streaming.clear();
  if (stick) trimOlder();
  usageLines();
  const box = document.getElementById("messages");
  const dim = revertedIds();
  const lastAnswer = lastAnswerId();
  const nodes = [];
  if (olderPage) nodes.push(olderButton);
  for (const id of order) {
    const m = messages.get(id);
    if (!m) continue;
    const node = messageNode(m, dim, id === lastAnswer);
    if (node) nodes.push(node);
  }
  for (const id of msgNodes.keys()) if (!messages.has(id)) { msgNodes.delete(id); actionBars.delete(id); }
  const later = laterBranch();
  if (later) nodes.push(later);
  reconcile(box, nodes);
  olderObserver.disconnect();
  if (olderPage) olderObserver.observe(olderButton);
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
  for (const pid of m.partIds) partsKey += `${parts.get(pid)?.v}${dim.has(pid) ? "d" : ""},`;
  const key = `${m.v}|${partsKey}|${dimmed}|${spent}|${isLastAnswer}|${globalV}|${editing.has(m.id)}`;
  const known = msgNodes.get(m.id);
  if (known && known.key === key) return known.node;
  const div = known ? known.node : el("div");
  div.className = "msg " + m.role + (dimmed ? " reverted" : "");
  div.dataset.messageId = m.id;
  const kids = [];
  if (editing.has(m.id)) {
    kids.push(editForm(m));
  } else {
    for (const pid of m.partIds) {
      const part = parts.get(pid);
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
  const live = currentStatus === "busy" || currentStatus === "waiting";
  if (!recovered && (m.completed_at || m.error || live || !m.partIds.length)) return null;
  const note = el("div", "msg-note stopped", "Stopped");
  note.title = recovered ? m.error.message : "The answer was stopped here; Resume answers again.";
  return note;
}

function showRunError(message) {
  // A run's error (the model failed) is shown once: in its message, when the message has it.
  const shown = order.some((id) => messages.get(id)?.error?.message === message);
  if (!shown) showError(message);
}

function lastAnswerId() {
  for (let i = order.length - 1; i >= 0; i--) {
    const m = messages.get(order[i]);
    if (m && m.role === "assistant") return m.id;
    if (m && m.role === "user") return null;
  }
  return null;
}

function button(label, title, onClick, cls = "act") {
  const b = el("button", cls, label);
  b.type = "button";
  b.title = title;
  // The name starts with what the button shows (a word label), then says what it does.
  const says = /\w/.test(label) && !title.toLowerCase().includes(label.toLowerCase());
  b.setAttribute("aria-label", says ? `${label}: ${title}` : title);
  b.addEventListener("click", onClick);
  return b;
}

const actionBars = new Map(); // message id -> {key, node}: kept while the moves are the same

function messageActions(m, isLastAnswer) {
  // The message's moves. They float over the bubble's lower edge on hover or keyboard focus
  // (no empty strip in every bubble); on a touch screen a tap on the bubble shows them. The
  // branch switcher, which says where the reader is, always shows. A bar whose moves did not
  // change is kept, so a button that has the keyboard's focus keeps it.
  const siblings = children.get(m.parent_id || "") || [];
  const point = checkpoints.get(m.id);
  const idle = currentStatus !== "busy" && currentStatus !== "waiting";
  const key = [siblings.join(","), point ? `${point.run_id}:${point.index}:${point.run_status}` : "",
    idle, isLastAnswer, editing.has(m.id)].join("|");
  const known = actionBars.get(m.id);
  if (known && known.key === key) return known.node;
  const bar = el("div", "actions");
  actionBars.set(m.id, { key, node: bar });
  if (siblings.length > 1) {
    const at = siblings.indexOf(m.id);
    const nav = el("span", "branches");
    const prev = button("‹", "Previous branch", () => switchHead(siblings[at - 1]), "nav prev");
    prev.disabled = at <= 0;
    const next = button("›", "Next branch", () => switchHead(siblings[at + 1]), "nav next");
    next.disabled = at >= siblings.length - 1;
    nav.append(prev, el("span", "count", `${at + 1}/${siblings.length}`), next, compareButton(m, "nav compare"));
    bar.append(nav);
    bar.classList.add("has-branches");
  }
  const moves = el("span", "moves");
  if (m.role === "user" && point && idle && !editing.has(m.id)) {
    moves.append(button("Edit", "Edit", () => startEdit(m), "act edit"));
  }
  if (m.role === "user" && point && idle && !m.partIds.some((id) => parts.get(id)?.source)) {
    moves.append(alternativesButton(m));
  }
  if (point && idle) {
    moves.append(button("Fork from here", "Fork the session (chat and files) at this message", () => forkAt(m.id), "act fork-here"));
    moves.append(button("Continue from here", "Ask a new question from this point, as a new branch", () => armContinue(point, m.id), "act continue-here"));
    if (isLastAnswer && point.run_status !== "running" && point.run_status !== "pending") {
      moves.append(button("Regenerate", "Answer again from here (tools are not run again)", () => regenerate(point.run_id, m.id), "act regenerate"));
    }
  }
  if (point) {
    // A read: offered while a run works too (the files as recorded at this message).
    const files = el("a", "act download-here", "Download files");
    files.href = api(`/archive/?message_id=${encodeURIComponent(m.id)}`);
    files.setAttribute("download", "");
    files.title = "The files at this message, as a .zip";
    files.setAttribute("aria-label", "Download files: the files at this message, as a .zip");
    moves.append(files);
  }
  moves.append(compareButton(m));
  moves.append(revertButton(m.id));
  bar.append(moves);
  // One tab stop for the whole bar; the arrow keys go from move to move.
  return roving(bar, m.role === "user" ? "Moves of your message" : "Moves of the answer");
}

// -- edit and resend -----------------------------------------------------------------------
function startEdit(m) {
  editing.set(m.id, textOf(m));
  render();
  requestAnimationFrame(() => {
    const box = document.querySelector(`[data-message-id="${m.id}"] textarea.edit-text`);
    if (box) { box.focus(); box.setSelectionRange(box.value.length, box.value.length); }
  });
}

function editForm(m) {
  const form = el("form", "edit-form");
  const text = el("textarea", "edit-text");
  text.rows = Math.min(12, Math.max(2, (editing.get(m.id) || "").split("\n").length));
  text.value = editing.get(m.id) || "";
  text.setAttribute("aria-label", "Edited message");
  text.addEventListener("input", () => editing.set(m.id, text.value));
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    if (e.key === "Escape") { editing.delete(m.id); render(); }
  });
  const row = el("div", "row");
  const send = el("button", "", "Send");
  send.type = "submit";
  send.setAttribute("aria-label", "Send the edited message");
  row.append(send, button("Cancel", "Cancel the edit", () => { editing.delete(m.id); render(); }, "secondary"));
  form.append(text, el("p", "muted", "Sending starts a new branch from here; this one stays (‹ ›)."), row);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const value = text.value.trim();
    if (!value) return;
    const point = checkpoints.get(m.id);
    if (!point) return showError("This message cannot be edited yet; try again in a moment.");
    showError("");
    try {
      // The edited text hangs from the message's parent: the run's transcript up to just
      // before it (a user message is one entry), the files put back as they were there.
      await call("POST", `/api/runs/${point.run_id}/continue/`, { continue_from: point.index - 1, input: value });
      editing.delete(m.id);
      render();
    } catch (err) { showError(err.message); }
  });
  return form;
}

function laterBranch() {
  // After a rollback (or a branch switch to an earlier point) the head has children:
  // offer to go back to them.
  const head = session ? session.head_message_id : null;
  if (order.length && order[order.length - 1] !== head) return null;
  const below = (children.get(head || "") || []);
  if (!below.length) return null;
  const box = el("div", "later");
  box.append(el("span", "muted", `${below.length} later branch${below.length > 1 ? "es" : ""} after this point`));
  box.append(button("Show the later turns", "Switch to the newest later branch", () => switchHead(below[below.length - 1]), "secondary restore-branch"));
  return box;
}

async function switchHead(messageId) {
  showError("");
  try {
    setSession(await call("POST", api("/head/"), { message_id: messageId }));
    await loadMessages(false);
    await loadTree();
    render();
    loadFiles();
    loadChanges();
  } catch (err) { showError(err.message); }
}

async function forkAt(messageId) {
  showError("");
  try {
    const fork = await call("POST", api("/fork/"), messageId ? { message_id: messageId } : {});
    location.href = `/sessions/${fork.id}/`;
  } catch (err) { showError(err.message); }
}

function armContinue(point, messageId) {
  continueFrom = { run_id: point.run_id, index: point.index, message_id: messageId };
  renderContinueBar();
  document.getElementById("prompt").focus();
}

function renderContinueBar() {
  const bar = document.getElementById("continue-bar");
  bar.hidden = !continueFrom;
  if (!continueFrom) { bar.dataset.key = ""; return; }
  if (bar.dataset.key === continueFrom.message_id) return;
  bar.dataset.key = continueFrom.message_id;
  const m = messages.get(continueFrom.message_id);
  let text = textOf(m).replace(/\s+/g, " ").trim();
  if (!text && m) {
    const tool = m.partIds.map((id) => parts.get(id)).find((p) => p && p.type === "tool");
    text = tool ? `${tool.tool} ${tool.state?.input?.path ?? tool.state?.input?.command ?? ""}`.trim() : "";
  }
  const who = m?.role === "user" ? "your message" : "the answer";
  const quote = text ? `“${text.length > 80 ? text.slice(0, 79) + "…" : text}”` : "";
  bar.replaceChildren(
    el("span", "", `Continuing after ${who} ${quote} — your message starts a new branch.`),
    button("Cancel", "Stop continuing from that point", () => { continueFrom = null; renderContinueBar(); }, "secondary"),
  );
}

async function regenerate(runId, messageId) {
  showError("");
  notice("Regenerating…");
  regenerating = { runId, before: textOf(messages.get(messageId)) };
  try {
    await call("POST", `/api/runs/${runId}/regenerate/`, {});
  } catch (err) {
    regenerating = null;
    notice("");
    showError(err.message);
  }
}

function regenerateOutcome(runId) {
  // Say what came of it: a new answer equal to the old one would otherwise look like nothing.
  // The switcher ‹ › is named only where it is shown (the earlier answer is kept beside the
  // new one); a regenerate that replaces the answer has none.
  if (!regenerating) return;
  const now = textOf(messages.get(lastAnswerId()));
  const same = now === regenerating.before;
  regenerating = null;
  const first = messages.get(order.find((id) => messages.get(id)?.run_id === runId));
  const both = (children.get(first?.parent_id || "") || []).length > 1;
  if (same) notice(`Regenerated: the same answer again${both ? " (‹ › switches between the two)" : ""}.`);
  else notice(both ? "Regenerated: a new answer (‹ › shows the earlier one)." : "Regenerated: a new answer in place of the earlier one.");
}

async function rollback() {
  const n = parseInt(document.getElementById("rollback-n").value, 10);
  document.getElementById("session-menu").open = false;
  showError("");
  try {
    setSession(await call("POST", api("/rollback/"), { num_turns: Number.isNaN(n) ? 0 : n }));
    await loadMessages(false);
    await loadTree();
    render();
  } catch (err) { showError(err.message); }
}

// -- the socket ----------------------------------------------------------------------------
// The socket comes first, then the state over the API, then the events that came meanwhile.
// When the socket drops (a server restart), it is opened again, and once it is open the
// state is read again (it may have moved on while the socket was down).
//
// While the socket is down the chat is offline: a bar says "Reconnecting…" and counts down to
// the next try (1 s, doubling up to 8 s; "Try now" tries at once), the badge says "offline"
// rather than a status nobody can know, and a send is refused before it is tried (the text
// stays in the box).
let socket = null;
let everOpened = false;
let offline = false;
let retryDelay = 1000;
let retryTimer = 0;
let retryAt = 0;
let countdown = 0;
const NOT_SENT = "You are offline: the message was not sent. It stays in the box; send it again once the chat has reconnected.";

function setOffline(on) {
  if (on === offline) return;
  offline = on;
  document.getElementById("connection-bar").hidden = !on;
  clearInterval(countdown);
  if (on) countdown = setInterval(showCountdown, 250);
  else retryDelay = 1000;
  if (!on && document.getElementById("error").textContent === NOT_SENT) showError("");
  showBadge();
  updateControls();
}

function showCountdown() {
  const left = Math.ceil((retryAt - Date.now()) / 1000);
  document.getElementById("connection-text").textContent = retryTimer && left > 0
    ? `Reconnecting… The server cannot be reached; next try in ${left} s.`
    : "Reconnecting…";
}

function scheduleReconnect() {
  clearTimeout(retryTimer);
  retryAt = Date.now() + retryDelay;
  retryTimer = setTimeout(() => { retryTimer = 0; connect(); }, retryDelay);
  retryDelay = Math.min(retryDelay * 2, 8000);
  setOffline(true);
  showCountdown();
}

function reconnectNow() {
  if (!retryTimer) return; // a try is under way
  clearTimeout(retryTimer);
  retryTimer = 0;
  showCountdown();
  connect();
}

function suspectConnection() {
  // A request got no answer while the socket looks open: it is closed, and its close starts
  // the reconnecting above.
  if (socket && socket.readyState === WebSocket.OPEN) socket.close();
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const sid = sessionId;
  clearTimeout(retryTimer);
  retryTimer = 0;
  return new Promise((resolve) => {
    const ws = new WebSocket(`${proto}://${location.host}/ws/sessions/${sid}/`);
    socket = ws;
    ws.onmessage = (msg) => {
      if (ws !== socket) return;
      const ev = JSON.parse(msg.data);
      if (ev.type === "subscribed") {
        // Events reach this socket from here on (the server accepts a socket before it
        // joins the session's group): a socket that opened again catches up from now.
        const again = everOpened;
        if (again) restart();
        everOpened = true;
        resolve(again);
      }
      if (ready) handle(ev); else buffered.push(ev);
    };
    ws.onopen = () => {
      setOffline(false);
    };
    ws.onclose = (e) => {
      if (ws !== socket) return; // a socket of a session we left
      if (e.code === 4403) return showError("You may not see this session.");
      ready = false;
      scheduleReconnect();
    };
  });
}

let restarts = 0; // a socket that opened again starts its own catch-up; an older one stops

async function restart() {
  const mine = ++restarts;
  for (let attempt = 0; attempt < 30; attempt++) {
    if (mine !== restarts) return;
    try {
      await start(true);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, Math.min(5000, 500 * 2 ** attempt)));
    }
  }
  showError("The server does not answer; reload the page.");
}

const PERMISSION_TOOLS = ["write", "append", "delete", "shell", "read", "list", "wait"];
const toolsOff = new Map(); // tool -> why the deployment disables it (GET /api/tools/)

async function loadTools() {
  const tools = await call("GET", "/api/tools/").catch(() => null);
  toolsOff.clear();
  for (const t of tools?.results || []) if (!t.available) toolsOff.set(t.name, t.reason || "off");
  renderPermissions();
}

function renderPermissions() {
  // One choice per tool in the session menu; a tool with pattern rules shows them as set
  // (the API and the admin edit patterns).
  const box = document.getElementById("permissions");
  if (!box || !session) return;
  const rules = session.permissions || {};
  const rows = [];
  for (const tool of PERMISSION_TOOLS) {
    const rule = rules[tool];
    const label = el("label", "inline-field perm", tool + " ");
    const pick = el("select");
    pick.setAttribute("aria-label", `Permission for ${tool}`);
    pick.dataset.tool = tool;
    const off = toolsOff.get(tool);
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
    const rules = { ...(session.permissions || {}), [tool]: value };
    setSession(await call("PATCH", api("/"), { permissions: rules }));
    renderPermissions();
  } catch (err) { showError(err.message); }
}

let modelChoices = null;

async function renderModelPicker() {
  const pick = document.getElementById("model-picker");
  if (!pick || !session) return;
  if (!modelChoices) modelChoices = (await call("GET", "/api/models/")).results.map((m) => m.name);
  const names = modelChoices.includes(session.model) ? modelChoices : [session.model, ...modelChoices];
  pick.replaceChildren(...names.map((name) => {
    const o = el("option", "", name);
    o.value = name;
    o.selected = name === session.model;
    return o;
  }));
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

async function loadBudget() {
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

function showTitle() {
  document.getElementById("title").textContent = session.title || session.id;
  document.title = session.title || session.id;
  for (const a of document.querySelectorAll("a.export")) {
    a.href = api(`/export/?format=${a.dataset.format}`);
  }
  for (const a of document.querySelectorAll("a.download")) a.href = api(a.dataset.path);
}

async function start(again = false) {
  // The session and the newest page of messages come first and are shown at once; the tree
  // (branches, checkpoints: slower on a long session), the models and the panels follow.
  // Again (the socket reopened): what is shown is kept where the database agrees with it.
  const sid = sessionId;
  const [fresh, page] = await Promise.all([
    again ? call("GET", api("/")) : firstRead("session", () => call("GET", api("/"))),
    again && order.length ? call("GET", api("/messages/")) : loadMessages(false),
  ]);
  if (sid !== sessionId) return;
  if (page) applyStored(page, !LIVE.includes(fresh.status), new Set());
  setSession(fresh);
  showTitle();
  setStatus(session.status);
  renderPermissions();
  if (!again) loadTools();
  ready = true;
  for (const ev of buffered.splice(0)) handle(ev);
  flush(true);
  if (!again) focusPrompt();
  loadTree().then(() => { if (sid === sessionId) render(); }, () => {});
  loadBudget();
  renderModelPicker().catch(() => {});
  loadFiles();
  loadChanges();
  loadLineage();
  loadShare();
}

function focusPrompt() {
  // A chat that opens is ready to type in; not where a touch keyboard would cover half the
  // screen unasked, nor away from a field the reader is typing in.
  if (matchMedia("(hover: none) and (pointer: coarse)").matches) return;
  const at = document.activeElement;
  if (at && at !== document.body && at.matches("input, textarea, select")) return;
  document.getElementById("prompt").focus({ preventScroll: true });
}

async function switchSession(id, push = true) {
  // The sidebar opens another session in place: the socket, the state and the panels are
  // the new session's; the page (and the app) stays.
  if (id === sessionId) return;
  if (push) history.pushState({ session: id }, "", `/sessions/${id}/`);
  const old = socket;
  socket = null;
  if (old) old.close();
  sessionId = id;
  root.dataset.sessionId = id;
  ready = false;
  buffered = [];
  session = null;
  forgetAll();
  children = new Map();
  checkpoints = new Map();
  continueFrom = null;
  editing.clear();
  olderPage = null;
  revertPrompt = null;
  queued.clear();
  showQueued();
  globalV++;
  showError("");
  notice("");
  closeViewers();
  closeDrawers();
  document.getElementById("session-menu").open = false;
  markCurrent(id);
  flush(false);
  try {
    await openChat();
  } catch (err) { showError(err.message); }
}

async function openChat() {
  // The socket and the first read at once: the socket's handshake (accept, login, joining
  // the session's group) no longer holds back what the reader came for. The read may be
  // answered before the socket is subscribed; what was published in between reached
  // neither, so the chat then checks it missed nothing (`caughtUp`).
  const subscribed = connect();
  await start();
  subscribed.then((restarted) => { if (!restarted) caughtUp(); });
}

async function caughtUp() {
  // A live session catches up as after a reconnect (its run goes on); an idle one only when
  // it moved since it was read (a run started in another tab, a revert elsewhere).
  const seen = session;
  if (!seen) return;
  if (LIVE.includes(seen.status)) return restart();
  const sid = sessionId;
  const now = await call("GET", api("/")).catch(() => null);
  const known = session; // what the chat shows now (events since may have moved it)
  if (!now || !known || sid !== sessionId) return;
  if (now.status !== known.status || now.head_message_id !== known.head_message_id
    || now.updated_at !== known.updated_at) restart();
}

// -- the composer and the menu -----------------------------------------------------------
let sending = false; // a send is under way: Enter pressed twice sends once

async function sendPrompt(strategy) {
  const input = document.getElementById("prompt");
  const text = input.value.trim();
  if (!text || sending) return;
  if (offline) return showError(NOT_SENT);
  showError("");
  sending = true;
  try {
    if (continueFrom) {
      await call("POST", `/api/runs/${continueFrom.run_id}/continue/`, { continue_from: continueFrom.index, input: text });
      continueFrom = null;
      renderContinueBar();
    } else {
      const body = { messages: [{ role: "user", content: text }] };
      if (strategy) body.multitask_strategy = strategy;
      const run = await call("POST", api("/runs/"), body);
      if (strategy === "enqueue" && run?.status === "pending") showQueued(run.id, text);
      if (strategy === "interrupt") notice("Interrupting the current run: your message goes next.");
    }
    input.value = "";
    revertPrompt = null;
    stickToEnd = true;
  } catch (err) {
    showError(err.message === UNREACHABLE ? NOT_SENT : err.message);
    loadBudget();
  } finally {
    sending = false;
    input.focus();
  }
}

// Messages queued behind the run that holds the session: said under the box until their run
// starts (or is cancelled here).
const queued = new Map(); // run id -> text

function showQueued(runId, text) {
  if (runId) queued.set(runId, text);
  const box = document.getElementById("queued");
  box.hidden = !queued.size;
  if (!queued.size) { box.replaceChildren(); return; }
  const [first, words] = queued.entries().next().value; // the oldest: the next to run
  const short = words.replace(/\s+/g, " ");
  const more = queued.size > 1 ? ` (and ${queued.size - 1} more)` : "";
  const cancel = el("button", "secondary small", "Cancel");
  cancel.type = "button";
  cancel.setAttribute("aria-label", "Cancel the queued message");
  cancel.addEventListener("click", async () => {
    showError("");
    try {
      await call("POST", `/api/runs/${first}/cancel/`, {});
      queued.delete(first);
      showQueued();
    } catch (err) { showError(err.message); }
  });
  box.replaceChildren(
    el("span", "", `Queued: “${short.length > 60 ? short.slice(0, 59) + "…" : short}”${more} — sent when the current run ends.`),
    cancel,
  );
}

function unqueue(runId) {
  if (queued.delete(runId)) showQueued();
}

document.getElementById("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  sendPrompt(LIVE.includes(currentStatus) ? "enqueue" : undefined);
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
document.getElementById("reconnect-now").addEventListener("click", reconnectNow);
window.addEventListener("online", reconnectNow);
window.addEventListener("offline", suspectConnection);
document.getElementById("resume").addEventListener("click", async () => {
  showError("");
  try {
    await call("POST", api("/runs/"), { mode: "resume" });
    notice("Resumed: the agent answers again from the last step; the stopped text stays above.");
  } catch (err) { showError(err.message); }
});
document.getElementById("stop").addEventListener("click", async () => {
  await call("POST", api("/abort/"), {}).catch((err) => showError(err.message));
});
// On a touch screen (no hover), a tap on a bubble shows its moves; a tap elsewhere hides them.
document.getElementById("messages").addEventListener("click", (e) => {
  if (e.target.closest("button, a, input, textarea, summary, select")) return;
  const msg = e.target.closest(".msg");
  for (const open of document.querySelectorAll(".msg.touched")) if (open !== msg) open.classList.remove("touched");
  if (msg) msg.classList.toggle("touched");
});
window.addEventListener("popstate", () => {
  const match = location.pathname.match(/^\/sessions\/([^/]+)\/$/);
  if (match) switchSession(match[1], false);
});
initShare();
initDrawers();
initRepository(() => sessionId);
initAlternatives({ call, sessionId: () => sessionId, showError, reload: () => scheduleReload(0) });

await openChat();
// The session list comes after the conversation (it is not what the reader came for).
initSidebar({ call, showError, open: (id) => switchSession(id), current: () => sessionId });
