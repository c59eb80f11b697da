// What each live event of the session does to the chat. Text deltas carry their part id and
// offset, so text is neither lost nor doubled: a delta that starts past what we have is a gap
// (text not yet fetched) and triggers a refetch; one that ends before it is a duplicate and is
// dropped. A delta only grows its message: the render after it looks at that message alone.
import { loadChanges, loadFiles, loadLineage } from "../panels.js";
import { showPrepare } from "../repository.js";
import { showError } from "./api.js";
import {
  applyDelta, applyToolOutput, currentSession, eventState, getMessage, hasMessage, pathIds,
  redraw, removeMessage, removePart, setSession, setSessionStatus, setStatus, upsertMessage,
  upsertPart,
} from "./store.js";
import {
  leftOutByReload, noteSeq, refreshTree, scheduleRefetch, scheduleReload,
  scheduleResync,
} from "./sync.js";
import { clearRevertPrompt, isRegenerating, regenerateOutcome } from "./moves.js";
import { loadBudget, renderModelPicker, renderPermissions, unqueue } from "./controls.js";
import { renderStream } from "./render.js";

const { endedRuns } = eventState; // runs whose end this tab saw (their late "busy" is stale)
const ENDED_KEPT = 100;

export function handle(ev) {
  noteSeq(ev);
  if (leftOutByReload(ev)) return;
  switch (ev.type) {
    case "text-delta":
    case "reasoning-delta":
      if (grew(applyDelta(ev))) return renderStream();
      break;
    case "tool-output-delta":
      if (grew(applyToolOutput(ev))) return renderStream();
      break;
    case "run.requires_action": break; // the parts' approval cards and session.status say it
    case "message.updated": {
      const m = ev.message;
      const order = pathIds();
      const tail = order.length ? order[order.length - 1] : null;
      if (!hasMessage(m.id) && (m.parent_id || null) !== tail) {
        // A message that does not extend the path we show starts another branch (continue,
        // regenerate): the head moved, so show the path to it.
        scheduleReload();
        return;
      }
      upsertMessage(m);
      break;
    }
    case "message.part.updated": upsertPart(ev.part, false); break;
    case "message.removed": removeMessage(ev.message_id); break;
    case "message.part.removed": removePart(ev.message_id, ev.part_id); break;
    case "session.status":
      unqueue(ev.run_id);
      // The status a run's start published may come after that run's end (it left another
      // process first): a run known ended holds nothing.
      if (ev.status !== "idle" && endedRuns.has(ev.run_id)) break;
      setSessionStatus(ev.status);
      setStatus(ev.status);
      break;
    case "session.prepare": showPrepare(ev); break;
    case "session.diff": loadFiles(); loadChanges(); break;
    case "session.updated": sessionUpdated(ev); break;
    case "run.updated": runUpdated(ev); break;
    default: return;
  }
  redraw();
}

function grew(outcome) {
  // A delta past what we have: the text before it is read again (the render goes on).
  if (outcome === "gap") scheduleRefetch();
  return outcome === "grew";
}

function sessionUpdated(ev) {
  // Older than the session held (a reply to this tab's own request came first): what it
  // says is out of date — a revert it does not know of would be taken back.
  const session = currentSession();
  if (olderThan(ev.session, session)) return;
  const moved = !session || session.head_message_id !== ev.session.head_message_id;
  const hadRevert = session?.revert;
  setSession(ev.session);
  if (hadRevert && !ev.session.revert) clearRevertPrompt();
  renderPermissions();
  renderModelPicker();
  if (ev.session.status === "idle" || !endedRuns.has(ev.session.busy_run_id)) setStatus(ev.session.status);
  const head = ev.session.head_message_id;
  const order = pathIds();
  if (moved && (!order.includes(head) || order[order.length - 1] !== head)) {
    // The head left the end of the path we show (rollback, a branch switch, continue,
    // regenerate; from this tab, another one or the admin): show the path to it. The
    // run that moved it may already stream: the reload, or its refetch, brings its events.
    scheduleReload(0);
  }
}

function runUpdated(ev) {
  if (ev.run.status !== "pending") unqueue(ev.run.id);
  if (!["completed", "cancelled", "error"].includes(ev.run.status) && endedRuns.delete(ev.run.id)) {
    scheduleResync(); // a run resumed: its status is read again, whatever came before
  }
  if (ev.run.status === "error" && ev.run.error) showRunError(ev.run.error.message);
  if (["completed", "cancelled", "error"].includes(ev.run.status)) {
    endedRuns.add(ev.run.id);
    // The last few are enough (a late event is late by seconds): a tab left open for days
    // does not keep every run it saw end. A Set iterates in insertion order.
    if (endedRuns.size > ENDED_KEPT) endedRuns.delete(endedRuns.values().next().value);
    // Everything the run stored is committed before this event: show exactly that.
    scheduleResync(true, 0);
    refreshTree();
    loadBudget();
    loadLineage(); // its cost per branch (own / inherited) moved
    if (isRegenerating() && ev.run.mode === "regenerate") setTimeout(() => regenerateOutcome(ev.run.id), 400);
  }
}

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

function showRunError(message) {
  // A run's error (the model failed) is shown once: in its message, when the message has it.
  const shown = pathIds().some((id) => getMessage(id)?.error?.message === message);
  if (!shown) showError(message);
}
