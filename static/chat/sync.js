// Keeping the chat equal to what the database holds. The path is read a page at a time (the
// newest first; render.js reads older ones as the reader scrolls up); it is read again when
// the head moves (a reload), when a delta shows a gap (a merge refetch), and when events were
// missed (a resync).
//
// Every event says which event of the session came before it (`prev`, the `seq` of that one):
// when that is not the last one applied, events were missed, and the chat reads again what
// the database holds. So it does after a reconnect, and once when a run ends: streamed text
// that was never stored (its worker crashed) goes, and what is shown is what a reload shows.
// Only what differs from the stored state is drawn again, and the scroll position stays.
//
// What it changed is drawn by the layers above, which hear of it through the store: `redraw`
// (the next frame draws), `setSession` and `setStatus` (the source line, the badge).
import { FIRST_PAGE, api, call, firstRead, showError } from "./api.js";
import {
  LIVE, applyStored, currentSession, currentSessionId, currentStatus, pathIds, readPage, redraw,
  scrollToEndNext, setSession, setStatus, setTree, setWholePart, stable, syncState as sync,
} from "./store.js";

export function pathMoving() {
  sync.pathReads++;
}

export function scheduleRefetch(delay = 250) {
  if (sync.refetchTimer) return;
  sync.refetchTimer = setTimeout(async () => {
    sync.refetchTimer = null;
    try {
      await loadMessages(true);
    } catch {
      return scheduleRefetch(1000); // the server is away (a restart): try again
    }
    redraw();
  }, delay);
}

// -- the resync ----------------------------------------------------------------------------
// A resync reads the session and the newest page of messages and shows them. "Exact" (when
// no run streams, or a run just ended): what the database does not hold goes and what it
// holds differently is replaced. While a run streams, the fetched state is merged (streamed
// text may be ahead of the stored text). Objects live events changed since the resync was
// asked for (a next run streaming already) are merged, not replaced.
export function scheduleResync(final = false, delay = 100) {
  sync.resyncWanted = true;
  sync.resyncFinal ||= final;
  sync.touched ||= new Set();
  if (!sync.resyncTimer) sync.resyncTimer = setTimeout(runResync, delay);
}

async function runResync() {
  if (sync.reloadTimer) { sync.resyncTimer = setTimeout(runResync, 200); return; } // a reload is on: after it
  const sid = currentSessionId();
  while (sync.resyncWanted) {
    sync.resyncWanted = false;
    const final = sync.resyncFinal;
    sync.resyncFinal = false;
    const seen = sync.touched;
    sync.touched = new Set();
    const begun = sync.pathReads;
    let fresh, page;
    try {
      [fresh, page] = await Promise.all([call("GET", api("/")), call("GET", api("/messages/"))]);
    } catch {
      sync.resyncWanted = true;
      sync.resyncFinal ||= final;
      sync.resyncTimer = setTimeout(runResync, 1000); // the server is away (a restart): try again
      return;
    }
    if (sid !== currentSessionId()) break;
    if (begun !== sync.pathReads) {
      // The path moved while this was read (a branch switch): read again after its reload.
      for (const id of seen) sync.touched.add(id);
      sync.resyncWanted = true;
      sync.resyncFinal ||= final;
      sync.resyncTimer = setTimeout(runResync, 200);
      return;
    }
    for (const id of sync.touched) seen.add(id);
    // No run holds the session: what it stored is all there is (live objects merged).
    const exact = final || !LIVE.includes(fresh.status);
    let changed = applyStored(page, exact, seen);
    if (!seen.has("session") && (stable(fresh) !== stable(currentSession()) || fresh.status !== currentStatus())) {
      // A session event was missed (its status, head or revert).
      setSession(fresh);
      setStatus(fresh.status);
      changed = true;
      if (fresh.head_message_id && !pathIds().includes(fresh.head_message_id)) scheduleReload(0);
    }
    if (changed) redraw();
  }
  sync.resyncTimer = null;
  sync.touched = null;
}

// -- the reload ----------------------------------------------------------------------------
const PATH_EVENTS = new Set([
  "text-delta", "reasoning-delta", "message.updated", "message.part.updated",
  "message.removed", "message.part.removed",
]);

export function scheduleReload(delay = 100) {
  if (sync.reloadTimer) { sync.reloadAgain = true; return; }
  sync.missedEvents = false;
  sync.reloadTimer = setTimeout(async () => {
    sync.reloadAgain = false;
    try {
      await loadMessages(false);
      await loadTree();
    } catch {
      sync.reloadTimer = null;
      return scheduleReload(1000);
    }
    sync.reloadTimer = null;
    redraw();
    if (sync.reloadAgain) return scheduleReload(0);
    // The page may have been read before the events left out meanwhile (a slow answer, a
    // run that ended in the meantime): a merge refetch, asked for after them, has them.
    if (sync.missedEvents || currentStatus() === "busy") scheduleRefetch();
  }, delay);
}

export function leftOutByReload(ev) {
  // While the path is being reloaded its events are left out: the reload, or the merge
  // refetch after it, has them.
  if (!(sync.reloadTimer && PATH_EVENTS.has(ev.type))) return false;
  sync.missedEvents = true;
  return true;
}

// -- pages of the path ---------------------------------------------------------------------
export async function loadMessages(merge) {
  const sid = currentSessionId();
  const begun = merge ? sync.pathReads : ++sync.pathReads;
  const page = merge ? await call("GET", api("/messages/"))
    : await firstRead("messages", () => call("GET", api(`/messages/?limit=${FIRST_PAGE}`)));
  if (sid !== currentSessionId()) return; // the sidebar switched sessions meanwhile
  if (begun !== sync.pathReads) {
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

export async function showWholePart(partId) {
  try {
    const whole = await call("GET", `/api/parts/${partId}/`);
    setWholePart(partId, whole);
    redraw();
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

export function refreshTree() {
  clearTimeout(sync.treeTimer);
  sync.treeTimer = setTimeout(async () => { await loadTree(); redraw(); }, 150);
}

// -- the events' order ---------------------------------------------------------------------

// A run in progress and no event for QUIET_MS: its last events may be lost (its worker was
// killed between storing them and publishing them; no later event will show a `prev` gap).
// Read the session again — once per quiet period.
const QUIET_MS = 10000;

export function watchQuiet() {
  setInterval(() => {
    if (!currentSessionId() || !LIVE.includes(currentStatus()) || sync.resyncTimer) return;
    if (Date.now() - sync.lastEventAt < QUIET_MS) return;
    sync.lastEventAt = Date.now();
    scheduleResync();
  }, 2000);
}

export function noteSeq(ev) {
  sync.lastEventAt = Date.now();
  // A `prev` other than the last `seq` applied: events were missed (or came out of order).
  if (ev.type === "subscribed") { sync.lastSeq = null; return; }
  if (typeof ev.seq !== "number") return;
  if (sync.touched) {
    for (const id of [ev.message_id, ev.part_id, ev.message?.id, ev.part?.id, ev.part?.message_id]) {
      if (id) sync.touched.add(id);
    }
    if (ev.type.startsWith("session.")) sync.touched.add("session");
  }
  if (sync.lastSeq !== null && ev.prev !== undefined && ev.prev !== sync.lastSeq) scheduleResync();
  sync.lastSeq = sync.lastSeq === null ? ev.seq : Math.max(sync.lastSeq, ev.seq);
}
