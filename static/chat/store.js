// The chat's state, all of it: what the chat knows of the session it shows (the session and
// its status, the messages and parts of the active path, the newest KEEP at most, in order;
// the branches and checkpoints the shown messages need; the versions a render compares) and
// what the other modules keep between calls (timers, the socket, a move that is armed, an
// open menu). No other module has a module-level `let` (tests/test_js_structure.py), so what
// the chat knows, and who changes it, is read here. The store imports nothing: the layers
// above it (static/app.js lists them) read it, change it through the functions below, and
// hear of a change through `subscribe`, which is also how a lower module asks a higher one
// to act without importing it.
//
// `state` is one object. The path (messages, parts, order, tree, versions) changes only
// through the functions here; each other section is sealed (a misspelt field throws) and
// written by the one module it names, the others using the small setters below.
//
// Every message and part carries a version (v); `globalV` is bumped by what every message's
// look depends on (status, tree, revert). `structural` says something other than streamed
// text changed (the next render looks at every message); `streaming` holds the messages whose
// text or output grew since the last render.

const KEEP = 200; // messages kept in memory and in the page; past it the oldest go
export const LIVE = ["busy", "waiting"]; // statuses in which a run holds the session

const section = (fields) => Object.seal(fields);

const state = Object.seal({
  sessionId: null, // the session the chat shows (the sidebar switches it in place)
  messages: new Map(), // id -> {id, role, parent_id, completed_at, error, partIds: [], v}
  parts: new Map(), // id -> part (with its version v)
  order: [], // message ids of the active path (the newest KEEP at most), in order
  session: null, // the session as the API shows it (status, revert, summary)
  status: "idle", // the status shown (the badge, the controls)
  offline: false, // the socket is down: nobody can know the status
  children: new Map(), // parent id ("" for roots) -> visible child ids, oldest first
  checkpoints: new Map(), // message id -> {run_id, index, kind, run_status}
  // The path comes a page at a time: the page nearest the head first; `olderPage` is the link
  // to the page before the oldest one shown, loaded when the reader scrolls up to it.
  olderPage: null,
  seq: 0, // versions of messages and parts
  globalV: 0, // bumped by what every message's look depends on (status, tree, revert)
  streaming: new Set(), // messages whose text or output grew since the last render
  structural: true, // something else changed: the next render looks at every message
  listeners: new Map(), // event name -> functions (subscribe)

  // api.js: the passing notice's timer.
  api: section({ noticeTimer: 0 }),
  // render.js: frames, the scroll, the usage lines.
  view: section({
    frame: 0, // the requested animation frame, if any
    stickToEnd: true, // the next render scrolls to the end (the first one, a reload)
    lastStreamDraw: 0, // when a stream was last drawn (performance.now())
    streamTimer: 0, // a stream's draw waiting for its turn
    readerAtEnd: true, // the reader is at the end (read when the pane scrolls)
    loadingOlder: false, // an older page is being read
    lastOfRun: new Map(), // message id -> the usage line of the run it ends
  }),
  // sync.js: reads of the path, reload, refetch, resync and the events' order.
  sync: section({
    refetchTimer: null, resyncTimer: null, reloadTimer: null, treeTimer: null,
    // Reads of the whole path begun (the head moved, or is moving): a read of messages begun
    // before the latest of them answers for a path that may not be shown any more.
    pathReads: 0,
    resyncWanted: false, // a resync was asked for (`resyncFinal`: as after a run's end)
    resyncFinal: false,
    touched: null, // ids live events changed since a resync was asked for ("session" too)
    reloadAgain: false, // asked for while the path was being fetched: it may have moved since
    missedEvents: false, // path events left out while the path was being fetched
    lastSeq: null, // `seq` of the last event of the session applied (null: none on this socket)
    lastEventAt: Date.now(), // when the last event came (a quiet run is read again)
  }),
  // socket.js: the socket and its reconnecting.
  socket: section({
    socket: null, everOpened: false, // the socket, and whether one was ever open
    retryDelay: 1000, retryTimer: 0, retryAt: 0, countdown: 0, // the next try, counted down
    ready: false, // the state was read: events are applied as they come
    buffered: [], // events that came before it
    restarts: 0, // a socket that opened again starts its own catch-up; an older one stops
  }),
  // events.js
  events: section({ endedRuns: new Set() }), // runs whose end this tab saw (their late "busy" is stale)
  // moves.js: a move that is armed or under way.
  moves: section({
    continueFrom: null, // {run_id, index, message_id} while "continue from here" is armed
    editing: new Map(), // user message id -> the text being edited
    revertPrompt: null, // what a revert put into the prompt box (an unrevert takes it out)
    regenerating: null, // {runId, before: text} while a regenerate is asked for
    promptEdits: 0, // the reader's edits of the prompt box so far
  }),
  // parts.js: what the reader did to a part, kept across renders.
  partView: section({
    openTools: new Set(), // tool cards (and compaction dividers) the reader opened
    denyReasons: new Map(), // part id -> the reason being typed
  }),
  // controls.js
  controls: section({
    sending: false, // a send is under way: Enter pressed twice sends once
    modelChoices: null, // the models' names (GET /api/models/), read once
    queued: new Map(), // run id -> text of a message queued behind the run that holds the session
    toolsOff: new Map(), // tool -> why the deployment disables it (GET /api/tools/)
  }),
  // The features beside the conversation, each written by its module.
  alternatives: section({
    sockets: [], // one per alternative shown
    // The open "how many" form: {messageId, node}. The chat draws it inside its message
    // (askNode), so a render of that message, which rebuilds its children, keeps it.
    asking: null,
  }),
  compare: section({
    dialog: null, // the <dialog>, made on first use
    shown: null, // {a, b, other} of what the dialog shows
    options: [], // [{label, a, b, other?, names: [A's, B's]}] of the open dialog
    mode: "unified", // how a file's diff is drawn: "unified" | "split"
  }),
  rewind: section({ openMenu: null }), // the rewind menu shown, if any (one at a time)
  repository: section({ preparing: null }), // the id of the session last shown "preparing"
  sidebar: section({ searchTimer: null, asked: 0 }), // the search: its timer, its requests
  share: section({ seq: 0 }), // requests about the share link (the latest one's answer counts)
});

// Each section, for the module that writes it (and those that read it).
export const {
  api: apiState, view: viewState, sync: syncState, socket: socketState, events: eventState,
  moves: moveState, partView: partState, controls: controlState, alternatives: alternativesState,
  compare: compareState, rewind: rewindState, repository: repositoryState,
  sidebar: sidebarState, share: shareState,
} = state;

// -- events ----------------------------------------------------------------------------------
// "session" (the session object was set: its source line), "status" (the status was set: the
// badge and the controls), "redraw" (something changed: draw on the next frame), "forget"
// (kind "part" or "message" with its id, or "all": what the page drew of them goes),
// "unreachable" (a request got no answer: suspect the socket), "open-session" (the sidebar
// asks for another session, in place).
export function subscribe(name, fn) {
  if (!state.listeners.has(name)) state.listeners.set(name, []);
  state.listeners.get(name).push(fn);
}

export function emit(name, ...args) {
  for (const fn of state.listeners.get(name) || []) fn(...args);
}

function forgotten(kind, id) {
  emit("forget", kind, id);
}

export function redraw() {
  // Something other than streamed text changed: the next frame draws the conversation.
  state.structural = true;
  emit("redraw");
}

// -- reading -------------------------------------------------------------------------------
export function currentSession() { return state.session; }
export function currentStatus() { return state.status; }
export function isOffline() { return state.offline; }
export function getMessage(id) { return state.messages.get(id); }
export function hasMessage(id) { return state.messages.has(id); }
export function getPart(id) { return state.parts.get(id); }
export function pathIds() { return state.order; } // not to be changed by the caller
export function childrenOf(id) { return state.children.get(id || "") || []; }
export function checkpointOf(id) { return state.checkpoints.get(id); }
export function olderPageLink() { return state.olderPage; }
export function globalVersion() { return state.globalV; }
export function isStructural() { return state.structural; }
export function streamingIds() { return state.streaming; }

// -- the session -----------------------------------------------------------------------------
export function currentSessionId() { return state.sessionId; }

export function setSessionId(id) {
  state.sessionId = id;
}

export function setSession(next) {
  // The session as the server says; what every message shows of it (the revert) re-renders,
  // and what is drawn of the session itself hears of it ("session").
  if (JSON.stringify(state.session?.revert ?? null) !== JSON.stringify(next?.revert ?? null)) state.globalV++;
  state.session = next;
  emit("session", next);
}

export function setSessionStatus(next) {
  if (state.session) state.session.status = next;
}

export function setStatus(next) {
  // The status shown: the badge and the controls hear of it ("status"), changed or not.
  if (next !== state.status) state.globalV++;
  state.status = next;
  emit("status", next);
}

export function setOfflineFlag(on) {
  state.offline = on;
}

export function forgetSession() {
  // Another session opens in place: nothing of this one is kept, and no move of it stays armed.
  state.session = null;
  state.moves.continueFrom = null;
  state.moves.editing.clear();
  state.moves.revertPrompt = null;
  forgetAll();
  state.children = new Map();
  state.checkpoints = new Map();
  state.olderPage = null;
  state.globalV++;
}

// -- what changed since the last render ------------------------------------------------------
export function markStructural() {
  state.structural = true;
}

export function scrollToEndNext() {
  state.view.stickToEnd = true; // the next render scrolls to the end
}

export function continuingFrom() { return state.moves.continueFrom; }

export function forgetRevertPrompt() {
  state.moves.revertPrompt = null; // the prompt was sent: it confirmed the revert
}

export function clearChanges() {
  state.structural = false;
  state.streaming.clear();
}

// -- messages and parts --------------------------------------------------------------------
export function upsertMessage(m) {
  const known = state.messages.get(m.id);
  const entry = known || { partIds: [] };
  Object.assign(entry, {
    id: m.id, role: m.role, parent_id: m.parent_id, completed_at: m.completed_at,
    error: m.error, run_id: m.run_id, tokens: m.tokens || {}, v: ++state.seq,
  });
  state.messages.set(m.id, entry);
  if (!state.order.includes(m.id)) state.order.push(m.id);
  for (const p of m.parts || []) upsertPart(p, false);
}

export function upsertPart(p, fromFetch) {
  const known = state.parts.get(p.id);
  if (known && fromFetch && typeof known.text === "string" && typeof p.text === "string"
      && known.text.length > p.text.length) {
    p = { ...p, text: known.text }; // live deltas are ahead of the stored text
  }
  if (known && typeof known.state?.output === "string" && p.state
      && ["running", "pending"].includes(p.state.status)
      && known.state.output.length > (p.state.output || "").length) {
    p = { ...p, state: { ...p.state, output: known.state.output } }; // live output is ahead
  }
  state.parts.set(p.id, { ...(known || {}), ...p, textCount: undefined, outputCount: undefined, v: ++state.seq });
  let msg = state.messages.get(p.message_id);
  if (!msg) {
    msg = { id: p.message_id, role: "assistant", partIds: [], v: ++state.seq };
    state.messages.set(msg.id, msg);
    state.order.push(msg.id);
  }
  if (!msg.partIds.includes(p.id)) {
    msg.partIds.push(p.id);
    msg.partIds.sort((a, b) => (state.parts.get(a).order ?? 0) - (state.parts.get(b).order ?? 0));
    msg.v = ++state.seq;
  }
}

// A delta says "grew" (the text grew), "gap" (text before it was never received: the caller
// reads the path again), or nothing (already had it).
export function applyDelta(ev) {
  let part = state.parts.get(ev.part_id);
  if (!part) {
    if (ev.offset !== 0) return "gap";
    upsertPart({ id: ev.part_id, message_id: ev.message_id, order: 999,
      type: ev.type === "reasoning-delta" ? "reasoning" : "text", text: "" });
    part = state.parts.get(ev.part_id);
    state.structural = true; // a new part (perhaps a new message): the next render looks at all
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
  part.v = ++state.seq;
  state.streaming.add(part.message_id);
  return "grew";
}

export function applyToolOutput(ev) {
  // A running tool's output, framed like text deltas: offsets in code points.
  const part = state.parts.get(ev.part_id);
  if (!part) return "gap";
  const st = (part.state = { ...(part.state || {}) });
  // Only a running call prints: its "running" may have gone by while the path was read again
  // (the read found it pending: running is said live, stored with the output later).
  if (st.status === "pending") st.status = "running";
  const have = st.output || "";
  const haveCount = part.outputCount ?? codePoints(have);
  const added = [...ev.text];
  if (ev.offset > haveCount) return "gap";
  if (ev.offset + added.length <= haveCount) return;
  st.output = have + added.slice(haveCount - ev.offset).join("");
  part.outputCount = ev.offset + added.length;
  part.v = ++state.seq;
  state.streaming.add(part.message_id);
  return "grew";
}

function codePoints(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

export function removeMessage(id) {
  state.messages.delete(id);
  state.order = state.order.filter((known) => known !== id);
}

export function removePart(messageId, partId) {
  state.parts.delete(partId);
  const m = state.messages.get(messageId);
  if (m) { m.partIds = m.partIds.filter((id) => id !== partId); m.v = ++state.seq; }
}

export function setWholePart(partId, whole) {
  // A part the list cut, as the reader asked for it whole.
  state.parts.set(partId, { ...state.parts.get(partId), ...whole, truncated: false, v: ++state.seq });
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
  const m = state.messages.get(id);
  for (const pid of m ? m.partIds : []) { state.parts.delete(pid); forgotten("part", pid); }
  state.messages.delete(id);
}

export function applyStored(page, exact, keep) {
  // Whether anything shown changed. Only what differs gets a new version (and is drawn again).
  const list = page.results;
  const ids = list.map((m) => m.id);
  const start = ids.length ? state.order.indexOf(ids[0]) : 0;
  if (start < 0) {
    // The stored path does not meet what is shown (another branch): shown as a reload shows it.
    if (exact) { forgetAll(); state.olderPage = page.previous; }
    const added = addPage(list);
    if (exact) state.order = added;
    return true;
  }
  let changed = false;
  const stored = new Set(ids);
  for (const m of list) {
    const known = state.messages.get(m.id);
    if (!known || messageDiffers(known, m)) { upsertMessage({ ...m, parts: [] }); changed = true; }
    for (const p of m.parts) {
      const merge = !exact || keep.has(p.id);
      const kp = state.parts.get(p.id);
      if (kp && !partDiffers(kp, p, merge)) continue;
      if (!merge) state.parts.delete(p.id); // replaced by the stored part, not merged with it
      upsertPart(p, merge);
      changed = true;
    }
    if (!exact) continue;
    // The parts as stored, in their order; those the database does not hold (streamed,
    // never stored) go.
    const msg = state.messages.get(m.id);
    const have = new Set(m.parts.map((p) => p.id));
    for (const pid of msg.partIds) {
      if (!have.has(pid) && !keep.has(pid)) { state.parts.delete(pid); forgotten("part", pid); }
    }
    const next = [...have, ...msg.partIds.filter((pid) => !have.has(pid) && keep.has(pid))];
    if (next.join() !== msg.partIds.join()) { msg.partIds = next; msg.v = ++state.seq; changed = true; }
  }
  if (exact) {
    const after = state.order.slice(start).filter((id) => !stored.has(id));
    for (const id of after) if (!keep.has(id)) dropMessage(id);
    const next = [...state.order.slice(0, start), ...ids, ...after.filter((id) => keep.has(id))];
    if (next.join() !== state.order.join()) { state.order = next; changed = true; }
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
  if (!merge) { forgetAll(); state.olderPage = older; }
  const ids = addPage(page.results);
  if (!merge) state.order = ids;
}

export function addOlderPage(page) {
  const ids = addPage(page.results);
  state.order = [...ids, ...state.order.filter((id) => !ids.includes(id))];
  state.olderPage = page.previous;
}

function forgetAll() {
  state.messages = new Map();
  state.parts = new Map();
  state.order = [];
  forgotten("all");
}

export function trimOlder(linkBefore) {
  // Past KEEP messages the oldest are forgotten (the reader is at the bottom), so a long
  // session holds as much as a short one: the "earlier messages" link brings them back a
  // page at a time (`linkBefore(id)`: the link to the page before message id).
  if (state.order.length <= KEEP) return;
  const dropped = state.order.slice(0, state.order.length - KEEP);
  state.order = state.order.slice(state.order.length - KEEP);
  for (const id of dropped) {
    const m = state.messages.get(id);
    for (const pid of m ? m.partIds : []) { state.parts.delete(pid); forgotten("part", pid); }
    state.messages.delete(id);
    forgotten("message", id);
  }
  state.olderPage = linkBefore(state.order[0]);
}

// -- the tree --------------------------------------------------------------------------------
export function setTree(tree, timeline) {
  // Only what the shown messages need (their siblings, the head's children, their
  // checkpoints) is kept: the whole tree of a long session would grow with every reply.
  const shown = new Set(state.order);
  const parents = new Set([""]);
  for (const id of state.order) parents.add(state.messages.get(id)?.parent_id || "");
  if (state.session?.head_message_id) parents.add(state.session.head_message_id);
  state.children = new Map();
  for (const m of tree) {
    const key = m.parent_id || "";
    if (m.hidden || !parents.has(key)) continue;
    if (!state.children.has(key)) state.children.set(key, []);
    state.children.get(key).push(m.id);
  }
  state.checkpoints = new Map();
  for (const c of timeline) if (!c.hidden && shown.has(c.message_id)) state.checkpoints.set(c.message_id, c);
  state.globalV++;
  state.structural = true;
}

// -- questions about the path ------------------------------------------------------------------
export function textOf(m) {
  return m ? m.partIds.map((id) => state.parts.get(id)).filter((p) => p && p.type === "text").map((p) => p.text).join("") : "";
}

export function lastAnswerId() {
  for (let i = state.order.length - 1; i >= 0; i--) {
    const m = state.messages.get(state.order[i]);
    if (m && m.role === "assistant") return m.id;
    if (m && m.role === "user") return null;
  }
  return null;
}

export function revertedIds() {
  // What a pending revert covers: messages from the boundary on, or, for a part boundary,
  // that message's parts from the part on and every later message.
  const dim = new Set();
  const r = state.session && state.session.revert;
  if (!r) return dim;
  const at = state.order.indexOf(r.message_id);
  if (at < 0) return dim;
  state.order.forEach((id, i) => {
    if (i > at || (i === at && !r.part_id)) dim.add(id);
  });
  if (r.part_id) {
    const m = state.messages.get(r.message_id);
    const cut = state.parts.get(r.part_id);
    for (const pid of m ? m.partIds : []) {
      if (cut && (state.parts.get(pid).order ?? 0) >= (cut.order ?? 0)) dim.add(pid);
    }
  }
  return dim;
}

export function lastTurnUnfinished() {
  // The last message of the path is a user message with no answer yet, or an assistant
  // message that was not completed or has tools that never finished.
  const last = state.messages.get(state.order[state.order.length - 1]);
  if (!last) return false;
  // The clone or upload a session started from is a history event, not a prompt to answer.
  if (last.role === "user" && last.partIds.some((id) => state.parts.get(id)?.source)) return false;
  if (last.role === "user") return true;
  if (!last.completed_at) return true;
  if (last.role === "assistant" && last.error) return true; // cut short: resume goes on
  return last.partIds.some((id) => {
    const p = state.parts.get(id);
    return p.type === "tool" && ["pending", "running"].includes((p.state || {}).status);
  });
}
