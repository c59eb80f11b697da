// A message's moves and what they do: the branch switcher ‹ n/m ›, Edit (and resend), Fork,
// Continue from here, Regenerate, Download files, Compare, Alternatives, and ↺ revert to
// here with its rewind modes (rewind.js); the bars they leave (continuing, reverted).
import { alternativesButton } from "../alternatives.js";
import { compareButton } from "../compare.js";
import { loadChanges, loadFiles } from "../panels.js";
import { hideFilesRewound, showFilesRewound, withRewindModes } from "../rewind.js";
import { roving, rovingRefresh } from "../roving.js";
import { api, call, notice, showError } from "./api.js";
import { button, el } from "./dom.js";
import {
  checkpointOf, childrenOf, currentSession, currentStatus, getMessage, getPart, lastAnswerId,
  moveState as mv, pathIds, redraw, setSession, subscribe, textOf,
} from "./store.js";
import { loadMessages, loadTree, pathMoving } from "./sync.js";

export function isEditing(id) { return mv.editing.has(id); }
export function isRegenerating() { return mv.regenerating !== null; }

// The drawn bars, a cache of this module's (the store's "forget" empties it with the messages).
const actionBars = new Map(); // message id -> {bar, navKey, nav, moves, nodes}: kept for the message
subscribe("forget", (kind, id) => {
  if (kind === "all") actionBars.clear();
  else if (kind === "message") actionBars.delete(id);
});

export function forgetActionBar(id) {
  actionBars.delete(id);
}

export function messageActions(m, isLastAnswer) {
  // The message's moves. They float over the bubble's lower edge on hover or keyboard focus
  // (no empty strip in every bubble); on a touch screen a tap on the bubble shows them. The
  // branch switcher, which says where the reader is, always shows. The bar and every button
  // whose move did not change are kept through a render (only the moves that came or went
  // are put in or taken out), so a click that lands while the run's state changes under it
  // (a run ending, the tree refreshed) reaches its button, and the keyboard's focus stays.
  let known = actionBars.get(m.id);
  if (!known) {
    const bar = el("div", "actions");
    const moves = el("span", "moves");
    bar.append(moves);
    known = { bar, navKey: "", nav: null, moves, nodes: new Map() };
    actionBars.set(m.id, known);
    // One tab stop for the whole bar; the arrow keys go from move to move.
    roving(bar, m.role === "user" ? "Moves of your message" : "Moves of the answer");
  }
  placeNav(known, m);
  const wanted = movesOf(m, isLastAnswer);
  const nodes = wanted.map(([key, make]) => known.nodes.get(key) || make());
  known.nodes = new Map(wanted.map(([key], i) => [key, nodes[i]]));
  place(known.moves, nodes);
  rovingRefresh(known.bar);
  return known.bar;
}

function placeNav(known, m) {
  // The branch switcher ‹ n/m ›, rebuilt only when the siblings change.
  const siblings = childrenOf(m.parent_id);
  const navKey = siblings.length > 1 ? siblings.join(",") : "";
  if (navKey === known.navKey) return;
  known.navKey = navKey;
  known.nav?.remove();
  known.nav = null;
  known.bar.classList.toggle("has-branches", Boolean(navKey));
  if (!navKey) return;
  const at = siblings.indexOf(m.id);
  const nav = el("span", "branches");
  const prev = button("‹", "Previous branch", () => switchHead(siblings[at - 1]), "nav prev");
  prev.disabled = at <= 0;
  const next = button("›", "Next branch", () => switchHead(siblings[at + 1]), "nav next");
  next.disabled = at >= siblings.length - 1;
  nav.append(prev, el("span", "count", `${at + 1}/${siblings.length}`), next, compareButton(m, "nav compare"));
  known.bar.prepend(nav);
  known.nav = nav;
}

function movesOf(m, isLastAnswer) {
  // [key, make] for each move offered now; the key names what the button's action holds.
  const point = checkpointOf(m.id);
  const idle = currentStatus() !== "busy" && currentStatus() !== "waiting";
  const out = [];
  if (m.role === "user" && point && idle && !mv.editing.has(m.id)) {
    out.push(["edit", () => button("Edit", "Edit", () => startEdit(getMessage(m.id) || m), "act edit")]);
  }
  if (m.role === "user" && point && idle && !m.partIds.some((id) => getPart(id)?.source)) {
    out.push(["alternatives", () => alternativesButton(m)]);
  }
  if (point && idle) {
    out.push(["fork", () => button("Fork from here", "Fork the session (chat and files) at this message", () => forkAt(m.id), "act fork-here")]);
    const { run_id: runId, index } = point;
    out.push([`continue:${runId}:${index}`, () => button("Continue from here", "Ask a new question from this point, as a new branch", () => armContinue({ run_id: runId, index }, m.id), "act continue-here")]);
    if (isLastAnswer && point.run_status !== "running" && point.run_status !== "pending") {
      out.push([`regenerate:${runId}`, () => button("Regenerate", "Answer again from here (tools are not run again)", () => regenerate(runId, m.id), "act regenerate")]);
    }
  }
  if (point) out.push(["download", () => downloadLink(m.id)]);
  out.push(["compare", () => compareButton(m)]);
  out.push(["revert", () => revertButton(m.id)]);
  return out;
}

function downloadLink(messageId) {
  // A read: offered while a run works too (the files as recorded at this message).
  const files = el("a", "act download-here", "Download files");
  files.href = api(`/archive/?message_id=${encodeURIComponent(messageId)}`);
  files.setAttribute("download", "");
  files.title = "The files at this message, as a .zip";
  files.setAttribute("aria-label", "Download files: the files at this message, as a .zip");
  return files;
}

function place(box, nodes) {
  // Make box's children exactly nodes, leaving in place every node already where it belongs.
  nodes.forEach((node, i) => {
    if (box.children[i] !== node) box.insertBefore(node, box.children[i] || null);
  });
  while (box.children.length > nodes.length) box.lastElementChild.remove();
}

export function initMoves() {
  document.getElementById("prompt").addEventListener("input", () => { mv.promptEdits++; });
  // On a touch screen (no hover), a tap on a bubble shows its moves; a tap elsewhere hides them.
  document.getElementById("messages").addEventListener("click", (e) => {
    if (e.target.closest("button, a, input, textarea, summary, select")) return;
    const msg = e.target.closest(".msg");
    for (const open of document.querySelectorAll(".msg.touched")) if (open !== msg) open.classList.remove("touched");
    if (msg) msg.classList.toggle("touched");
  });
}

// -- edit and resend -----------------------------------------------------------------------
function startEdit(m) {
  mv.editing.set(m.id, textOf(m));
  redraw();
  requestAnimationFrame(() => {
    const box = document.querySelector(`[data-message-id="${m.id}"] textarea.edit-text`);
    if (box) { box.focus(); box.setSelectionRange(box.value.length, box.value.length); }
  });
}

export function editForm(m) {
  const form = el("form", "edit-form");
  const text = el("textarea", "edit-text");
  text.rows = Math.min(12, Math.max(2, (mv.editing.get(m.id) || "").split("\n").length));
  text.value = mv.editing.get(m.id) || "";
  text.setAttribute("aria-label", "Edited message");
  text.addEventListener("input", () => mv.editing.set(m.id, text.value));
  text.setAttribute("aria-describedby", `edit-hint-${m.id}`);
  text.addEventListener("keydown", (e) => {
    // As in the main box: Enter (or Ctrl/⌘+Enter) sends, Shift+Enter adds a line; an Enter
    // that confirms an input method's composition (Japanese, Chinese…) is not a send.
    if (e.key === "Escape") { mv.editing.delete(m.id); redraw(); }
    if (e.key !== "Enter" || e.isComposing || e.keyCode === 229 || e.shiftKey || e.altKey) return;
    e.preventDefault();
    form.requestSubmit();
  });
  const row = el("div", "row");
  const send = el("button", "", "Send");
  send.type = "submit";
  send.setAttribute("aria-label", "Send the edited message");
  const hint = el("span", "composer-hint", "Enter sends · Shift+Enter adds a line");
  hint.id = `edit-hint-${m.id}`;
  row.append(send, button("Cancel", "Cancel the edit", () => { mv.editing.delete(m.id); redraw(); }, "secondary"), hint);
  form.append(text, el("p", "muted", "Sending starts a new branch from here; this one stays (‹ ›)."), row);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const value = text.value.trim();
    if (!value) return;
    const point = checkpointOf(m.id);
    if (!point) return showError("This message cannot be edited yet; try again in a moment.");
    showError("");
    try {
      // The edited text hangs from the message's parent: the run's transcript up to just
      // before it (a user message is one entry), the files put back as they were there.
      await call("POST", `/api/runs/${point.run_id}/continue/`, { continue_from: point.index - 1, input: value });
      mv.editing.delete(m.id);
      redraw();
    } catch (err) { showError(err.message); }
  });
  return form;
}

// -- branches ------------------------------------------------------------------------------
export function laterBranch() {
  // After a rollback (or a branch switch to an earlier point) the head has children:
  // offer to go back to them.
  const session = currentSession();
  const order = pathIds();
  const head = session ? session.head_message_id : null;
  if (order.length && order[order.length - 1] !== head) return null;
  const below = childrenOf(head);
  if (!below.length) return null;
  const box = el("div", "later");
  box.append(el("span", "muted", `${below.length} later branch${below.length > 1 ? "es" : ""} after this point`));
  box.append(button("Show the later turns", "Switch to the newest later branch", () => switchHead(below[below.length - 1]), "secondary restore-branch"));
  return box;
}

async function switchHead(messageId) {
  showError("");
  pathMoving(); // what is read of the old path from now on answers too late
  try {
    setSession(await call("POST", api("/head/"), { message_id: messageId }));
    await loadMessages(false);
    await loadTree();
    redraw();
    loadFiles();
    loadChanges();
  } catch (err) { showError(err.message); }
}

export async function forkAt(messageId) {
  showError("");
  try {
    const fork = await call("POST", api("/fork/"), messageId ? { message_id: messageId } : {});
    location.href = `/sessions/${fork.id}/`;
  } catch (err) { showError(err.message); }
}

function armContinue(point, messageId) {
  mv.continueFrom = { run_id: point.run_id, index: point.index, message_id: messageId };
  renderContinueBar();
  document.getElementById("prompt").focus();
}

export function stopContinuing() {
  mv.continueFrom = null;
  renderContinueBar();
}

export function renderContinueBar() {
  const bar = document.getElementById("continue-bar");
  bar.hidden = !mv.continueFrom;
  if (!mv.continueFrom) { bar.dataset.key = ""; return; }
  if (bar.dataset.key === mv.continueFrom.message_id) return;
  bar.dataset.key = mv.continueFrom.message_id;
  const m = getMessage(mv.continueFrom.message_id);
  let text = textOf(m).replace(/\s+/g, " ").trim();
  if (!text && m) {
    const tool = m.partIds.map((id) => getPart(id)).find((p) => p && p.type === "tool");
    text = tool ? `${tool.tool} ${tool.state?.input?.path ?? tool.state?.input?.command ?? ""}`.trim() : "";
  }
  const who = m?.role === "user" ? "your message" : "the answer";
  const quote = text ? `“${text.length > 80 ? text.slice(0, 79) + "…" : text}”` : "";
  bar.replaceChildren(
    el("span", "", `Continuing after ${who} ${quote} — your message starts a new branch.`),
    button("Cancel", "Stop continuing from that point", stopContinuing, "secondary"),
  );
}

async function regenerate(runId, messageId) {
  showError("");
  notice("Regenerating…");
  mv.regenerating = { runId, before: textOf(getMessage(messageId)) };
  try {
    await call("POST", `/api/runs/${runId}/regenerate/`, {});
  } catch (err) {
    mv.regenerating = null;
    notice("");
    showError(err.message);
  }
}

export function regenerateOutcome(runId) {
  // Say what came of it: a new answer equal to the old one would otherwise look like nothing.
  // The switcher ‹ › is named only where it is shown (the earlier answer is kept beside the
  // new one); a regenerate that replaces the answer has none.
  if (!mv.regenerating) return;
  const now = textOf(getMessage(lastAnswerId()));
  const same = now === mv.regenerating.before;
  mv.regenerating = null;
  const first = getMessage(pathIds().find((id) => getMessage(id)?.run_id === runId));
  const both = childrenOf(first?.parent_id).length > 1;
  if (same) notice(`Regenerated: the same answer again${both ? " (‹ › switches between the two)" : ""}.`);
  else notice(both ? "Regenerated: a new answer (‹ › shows the earlier one)." : "Regenerated: a new answer in place of the earlier one.");
}

// -- revert ----------------------------------------------------------------------------------
export function revertButton(messageId, partId) {
  const b = el("button", "revert-here act", "↺ revert to here");
  b.type = "button";
  b.title = "Revert the conversation and the files to this point";
  b.setAttribute("aria-label", partId ? "Revert to this tool call" : "Revert to here");
  b.addEventListener("click", () => doRevert(messageId, partId));
  return withRewindModes(b, (mode) => doRevert(messageId, partId, mode), `${messageId}:${partId || ""}`);
}

async function doRevert(messageId, partId, mode = "both") {
  showError("");
  // The session's event (and with it the revert bar) can come before this answer: what the
  // reader typed (or sent) meanwhile is theirs, not to be replaced by the reverted prompt.
  const typed = mv.promptEdits;
  try {
    const body = { message_id: messageId };
    if (partId) body.part_id = partId;
    if (mode !== "both") body.mode = mode; // conversation | files (rewind.js)
    setSession(await call("POST", api("/revert/"), body));
    hideFilesRewound();
    if (mode === "files") {
      // The conversation stays; the files went back. Undo is an unrevert (rewind.js).
      showFilesRewound(currentSession(), { onUndone: (next) => { setSession(next); redraw(); loadFiles(); loadChanges(); } });
      redraw();
      loadFiles();
      loadChanges();
      return;
    }
    const session = currentSession();
    const boundary = getMessage(session.revert.message_id);
    if (boundary && boundary.role === "user" && !session.revert.part_id && mv.promptEdits === typed) {
      // Sending it again confirms the revert; an unrevert takes it out again.
      mv.revertPrompt = textOf(boundary);
      document.getElementById("prompt").value = mv.revertPrompt;
    }
    redraw();
    loadFiles();
    loadChanges();
  } catch (err) { showError(err.message); }
}

export function clearRevertPrompt() {
  const prompt = document.getElementById("prompt");
  if (mv.revertPrompt !== null && prompt.value === mv.revertPrompt) prompt.value = "";
  mv.revertPrompt = null;
}

async function revertMove(path) {
  showError("");
  try {
    setSession(await call("POST", api(path), {}));
    if (path === "/unrevert/") clearRevertPrompt();
    else mv.revertPrompt = null;
    if (path === "/cleanup/") await loadMessages(false);
    redraw();
    loadFiles();
    loadChanges();
  } catch (err) { showError(err.message); }
}

export function renderRevertBar() {
  const bar = document.getElementById("revert-bar");
  const session = currentSession();
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
