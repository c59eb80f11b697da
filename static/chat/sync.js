// Keeping the chat equal to what the database holds. The path is read a page at a time (the
// newest first, older ones as the reader scrolls up); it is read again when the head moves (a
// reload), when a delta shows a gap (a merge refetch), and when events were missed (a resync).
//
// Every event says which event of the session came before it (`prev`, the `seq` of that one):
// when that is not the last one applied, events were missed, and the chat reads again what
// the database holds. So it does after a reconnect, and once when a run ends: streamed text
// that was never stored (its worker crashed) goes, and what is shown is what a reload shows.
// Only what differs from the stored state is drawn again, and the scroll position stays.
import { FIRST_PAGE, api, call, currentSessionId, firstRead, showError } from "./api.js";
import {
  LIVE, addOlderPage, applyStored, currentSession, currentStatus, markStructural, olderPageLink,
  pathIds, readPage, setTree, setWholePart, stable,
} from "./store.js";
import { flush, render, scrollToEndNext, showSession } from "./render.js";
import { showStatus } from "./controls.js";

let refetchTimer = null;
// Reads of the whole path begun (the head moved, or is moving): a read of messages begun
// before the latest of them answers for a path that may not be shown any more.
let pathReads = 0;

export function pathMoving() {
  pathReads++;
}

export function scheduleRefetch(delay = 250) {
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

// -- the resync ----------------------------------------------------------------------------
// A resync reads the session and the newest page of messages and shows them. "Exact" (when
// no run streams, or a run just ended): what the database does not hold goes and what it
// holds differently is replaced. While a run streams, the fetched state is merged (streamed
// text may be ahead of the stored text). Objects live events changed since the resync was
// asked for (a next run streaming already) are merged, not replaced.
let resyncTimer = null;
let resyncWanted = false;
let resyncFinal = false;
let touched = null; // ids live events changed since a resync was asked for ("session" too)

export function scheduleResync(final = false, delay = 100) {
  resyncWanted = true;
  resyncFinal ||= final;
  touched ||= new Set();
  if (!resyncTimer) resyncTimer = setTimeout(runResync, delay);
}

async function runResync() {
  if (reloadTimer) { resyncTimer = setTimeout(runResync, 200); return; } // a reload is on: after it
  const sid = currentSessionId();
  while (resyncWanted) {
    resyncWanted = false;
    const final = resyncFinal;
    resyncFinal = false;
    const seen = touched;
    touched = new Set();
    const begun = pathReads;
    let fresh, page;
    try {
      [fresh, page] = await Promise.all([call("GET", api("/")), call("GET", api("/messages/"))]);
    } catch {
      resyncWanted = true;
      resyncFinal ||= final;
      resyncTimer = setTimeout(runResync, 1000); // the server is away (a restart): try again
      return;
    }
    if (sid !== currentSessionId()) break;
    if (begun !== pathReads) {
      // The path moved while this was read (a branch switch): read again after its reload.
      for (const id of seen) touched.add(id);
      resyncWanted = true;
      resyncFinal ||= final;
      resyncTimer = setTimeout(runResync, 200);
      return;
    }
    for (const id of touched) seen.add(id);
    // No run holds the session: what it stored is all there is (live objects merged).
    const exact = final || !LIVE.includes(fresh.status);
    let changed = applyStored(page, exact, seen);
    if (!seen.has("session") && (stable(fresh) !== stable(currentSession()) || fresh.status !== currentStatus())) {
      // A session event was missed (its status, head or revert).
      showSession(fresh);
      showStatus(fresh.status);
      changed = true;
      if (fresh.head_message_id && !pathIds().includes(fresh.head_message_id)) scheduleReload(0);
    }
    if (changed) render();
  }
  resyncTimer = null;
  touched = null;
}

// -- the reload ----------------------------------------------------------------------------
const PATH_EVENTS = new Set([
  "text-delta", "reasoning-delta", "message.updated", "message.part.updated",
  "message.removed", "message.part.removed",
]);

let reloadTimer = null;
let reloadAgain = false; // asked for while the path was being fetched: it may have moved since
let missedEvents = false; // path events left out while the path was being fetched

export function scheduleReload(delay = 100) {
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
    if (missedEvents || currentStatus() === "busy") scheduleRefetch();
  }, delay);
}

export function leftOutByReload(ev) {
  // While the path is being reloaded its events are left out: the reload, or the merge
  // refetch after it, has them.
  if (!(reloadTimer && PATH_EVENTS.has(ev.type))) return false;
  missedEvents = true;
  return true;
}

// -- pages of the path ---------------------------------------------------------------------
let loadingOlder = false;

export async function loadMessages(merge) {
  const sid = currentSessionId();
  const begun = merge ? pathReads : ++pathReads;
  const page = merge ? await call("GET", api("/messages/"))
    : await firstRead("messages", () => call("GET", api(`/messages/?limit=${FIRST_PAGE}`)));
  if (sid !== currentSessionId()) return; // the sidebar switched sessions meanwhile
  if (begun !== pathReads) {
    // The path moved (or was about to: a branch switch) meanwhile: its own read has it. A
    // switch the server refused reads none, so a merge read set aside is asked again.
    if (merge) scheduleRefetch();
    return;
  }
  if (!merge) scrollToEndNext();
  readPage(page, merge, merge ? undefined : fullPages(page.previous));
}

function fullPages(link) {
  // Older pages at the API's own size: only the first read is kept short.
  return link ? link.replace(/([?&])limit=\d+(&|$)/, (_, before, after) => (after ? before : "")) : link;
}

export async function loadOlder() {
  if (!olderPageLink() || loadingOlder) return;
  loadingOlder = true;
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
    loadingOlder = false;
  }
}

export async function showWholePart(partId) {
  try {
    const whole = await call("GET", `/api/parts/${partId}/`);
    setWholePart(partId, whole);
    render();
  } catch (err) { showError(err.message); }
}

// -- the tree ------------------------------------------------------------------------------
export async function loadTree() {
  const [tree, timeline] = await Promise.all([
    call("GET", api("/tree/")).catch(() => []),
    call("GET", api("/checkpoints/")).catch(() => []),
  ]);
  setTree(tree, timeline);
}

let treeTimer = null;
export function refreshTree() {
  clearTimeout(treeTimer);
  treeTimer = setTimeout(async () => { await loadTree(); render(); }, 150);
}

// -- the events' order ---------------------------------------------------------------------
let lastSeq = null; // `seq` of the last event of the session applied (null: none on this socket)

// A run in progress and no event for QUIET_MS: its last events may be lost (its worker was
// killed between storing them and publishing them; no later event will show a `prev` gap).
// Read the session again — once per quiet period.
const QUIET_MS = 10000;
let lastEventAt = Date.now();

export function watchQuiet() {
  setInterval(() => {
    if (!currentSessionId() || !LIVE.includes(currentStatus()) || resyncTimer) return;
    if (Date.now() - lastEventAt < QUIET_MS) return;
    lastEventAt = Date.now();
    scheduleResync();
  }, 2000);
}

export function noteSeq(ev) {
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
