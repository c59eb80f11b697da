// The chat view: subscribe first, then load the conversation over the API, then apply live
// events. Text deltas carry their part id and offset, so text is neither lost nor doubled:
// a delta that starts past what we have is a gap (text not yet fetched) and triggers a
// refetch; one that ends before it is a duplicate and is dropped.
const root = document.getElementById("chat");
const sessionId = root.dataset.sessionId;
const api = (path) => `/api/sessions/${sessionId}${path}`;
const messages = new Map(); // id -> {id, role, parent_id, completed_at, error, partIds: []}
const parts = new Map(); // id -> part
let order = []; // message ids of the active path, in order
let session = null; // the session as the API shows it (status, revert, summary)
let ready = false;
const buffered = [];
let refetchTimer = null;
let children = new Map(); // parent id ("" for roots) -> visible child ids, oldest first
let checkpoints = new Map(); // message id -> {run_id, index, kind, run_status}
const openTools = new Set(); // tool cards the user opened (kept across renders)
let continueFrom = null; // {run_id, index, message_id} while "continue from here" is armed

function csrf() {
  const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

async function call(method, path, body) {
  const res = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) throw new Error(data?.error?.message || `HTTP ${res.status}`);
  return data;
}

function showError(text) {
  const el = document.getElementById("error");
  el.textContent = text || "";
  el.hidden = !text;
}

function upsertMessage(m) {
  const known = messages.get(m.id);
  const entry = known || { partIds: [] };
  Object.assign(entry, {
    id: m.id, role: m.role, parent_id: m.parent_id, completed_at: m.completed_at,
    error: m.error, run_id: m.run_id, tokens: m.tokens || {},
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
  parts.set(p.id, { ...(known || {}), ...p, textCount: undefined, outputCount: undefined });
  let msg = messages.get(p.message_id);
  if (!msg) {
    msg = { id: p.message_id, role: "assistant", partIds: [] };
    messages.set(msg.id, msg);
    order.push(msg.id);
  }
  if (!msg.partIds.includes(p.id)) {
    msg.partIds.push(p.id);
    msg.partIds.sort((a, b) => (parts.get(a).order ?? 0) - (parts.get(b).order ?? 0));
  }
}

function applyDelta(ev) {
  let part = parts.get(ev.part_id);
  if (!part) {
    if (ev.offset !== 0) return scheduleRefetch();
    upsertPart({ id: ev.part_id, message_id: ev.message_id, order: 999,
      type: ev.type === "reasoning-delta" ? "reasoning" : "text", text: "" });
    part = parts.get(ev.part_id);
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

let reloadTimer = null;
function scheduleReload(delay = 100) {
  if (reloadTimer) return;
  reloadTimer = setTimeout(async () => {
    try {
      await loadMessages(false);
      await loadTree();
    } catch {
      reloadTimer = null;
      return scheduleReload(1000);
    }
    reloadTimer = null;
    render();
    // Events that came while the path was fetched: a merge refetch catches them up.
    if (currentStatus === "busy") scheduleRefetch();
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

async function loadMessages(merge) {
  const page = await call("GET", api("/messages/"));
  if (!merge) { messages.clear(); parts.clear(); order = []; olderPage = page.previous; }
  const ids = addPage(page.results);
  if (!merge) order = ids;
}

async function loadOlder() {
  if (!olderPage || loadingOlder) return;
  loadingOlder = true;
  try {
    const page = await call("GET", olderPage);
    const ids = addPage(page.results);
    order = [...ids, ...order.filter((id) => !ids.includes(id))];
    olderPage = page.previous;
    // Keep what the reader looks at in place while the older messages go in above it.
    const scroller = document.scrollingElement;
    const fromBottom = scroller.scrollHeight - scroller.scrollTop;
    render();
    scroller.scrollTop = scroller.scrollHeight - fromBottom;
  } catch (err) {
    showError(err.message);
  } finally {
    loadingOlder = false;
  }
}

const olderObserver = new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting)) loadOlder();
});

function olderButton() {
  const b = el("button", "secondary older", "Show earlier messages");
  b.type = "button";
  b.id = "load-older";
  b.addEventListener("click", loadOlder);
  olderObserver.disconnect();
  olderObserver.observe(b);
  return b;
}

async function showWholePart(partId) {
  try {
    const whole = await call("GET", `/api/parts/${partId}/`);
    parts.set(partId, { ...parts.get(partId), ...whole, truncated: false });
    render();
  } catch (err) { showError(err.message); }
}

async function loadTree() {
  const [tree, timeline] = await Promise.all([
    call("GET", api("/tree/")).catch(() => []),
    call("GET", api("/checkpoints/")).catch(() => []),
  ]);
  children = new Map();
  for (const m of tree) {
    if (m.hidden) continue;
    const key = m.parent_id || "";
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(m.id);
  }
  checkpoints = new Map();
  for (const c of timeline) if (!c.hidden) checkpoints.set(c.message_id, c);
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

function handle(ev) {
  // While the path is being reloaded, its events wait for the reload (which has them).
  if (reloadTimer && PATH_EVENTS.has(ev.type)) return;
  switch (ev.type) {
    case "text-delta":
    case "reasoning-delta":
      applyDelta(ev); break;
    case "tool-output-delta": applyToolOutput(ev); break;
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
      if (m) m.partIds = m.partIds.filter((id) => id !== ev.part_id);
      break;
    }
    case "session.status": setStatus(ev.status); break;
    case "session.diff": loadFiles(); loadChanges(); break;
    case "session.updated": {
      const moved = !session || session.head_message_id !== ev.session.head_message_id;
      session = ev.session;
      renderPermissions();
      renderModelPicker();
      setStatus(ev.session.status);
      const head = ev.session.head_message_id;
      if (moved && (!order.includes(head) || order[order.length - 1] !== head)) {
        // The head left the end of the path we show (rollback, a branch switch, continue,
        // regenerate; from this tab, another one or the admin): show the path to it.
        loadMessages(false).then(() => { render(); refreshTree(); }, () => scheduleReload(1000));
      }
      break;
    }
    case "run.updated":
      if (ev.run.status === "error" && ev.run.error) showError(ev.run.error.message);
      if (["completed", "cancelled", "error", "paused"].includes(ev.run.status)) refreshTree();
      break;
    default: return;
  }
  render();
}

let currentStatus = "idle";

function setStatus(status) {
  currentStatus = status;
  const badge = document.getElementById("status");
  badge.textContent = status;
  badge.className = "badge " + status;
  updateControls();
}

function lastTurnUnfinished() {
  // The last message of the path is a user message with no answer yet, or an assistant
  // message that was not completed or has tools that never finished.
  const last = messages.get(order[order.length - 1]);
  if (!last) return false;
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
  document.getElementById("stop").hidden = !busy && !waiting;
  document.getElementById("resume").hidden = busy || waiting || !lastTurnUnfinished();
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function renderPartBody(p) {
  if (p.type === "text") return el("div", "text", p.text);
  if (p.type === "reasoning") return el("div", "reasoning", p.text);
  if (p.type === "tool") {
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
    const meta = s.metadata || {};
    const label = meta.interrupted ? `interrupted (${meta.reason || "?"})` : s.status || "";
    head.append(el("span", "name", p.tool), el("span", "state " + (s.status || ""), label));
    const input = s.input || {};
    head.append(el("span", "muted", input.path ?? input.command ?? (input.seconds !== undefined ? `${input.seconds}s` : "")));
    head.setAttribute("aria-label", `Tool ${p.tool}, ${label}: show input and output`);
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
  if (p.type === "compaction") {
    // A divider that opens to the summary the model sees in place of the older messages.
    const box = el("details", "compaction");
    box.open = openTools.has(p.id); // kept open across renders once opened
    const head = el("summary", "", `Conversation compacted: ${p.replaced ?? "earlier"} messages summarised for the model`);
    head.addEventListener("click", () => {
      if (box.open) openTools.delete(p.id); else openTools.add(p.id);
    });
    box.append(head);
    box.append(el("div", "text", p.text || ""));
    return box;
  }
  if (p.type === "patch") return el("div", "patch", "changed: " + (p.files || []).join(", "));
  return null;
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

function renderPart(p) {
  const node = renderPartBody(p);
  if (node && p.truncated) {
    // Lists cut very long fields; the whole part is one click away.
    const more = el("button", "link show-whole", "Cut here — show all");
    more.type = "button";
    more.addEventListener("click", () => showWholePart(p.id));
    node.append(more);
  }
  return node;
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
  const b = el("button", "revert-here", "↺ revert to here");
  b.type = "button";
  b.title = "Revert the conversation and the files to this point";
  b.addEventListener("click", () => doRevert(messageId, partId));
  return b;
}

async function doRevert(messageId, partId) {
  showError("");
  try {
    session = await call("POST", api("/revert/"), partId ? { message_id: messageId, part_id: partId } : { message_id: messageId });
    const boundary = messages.get(session.revert.message_id);
    if (boundary && boundary.role === "user" && !session.revert.part_id) {
      const text = boundary.partIds.map((id) => parts.get(id)).filter((p) => p.type === "text").map((p) => p.text).join("");
      document.getElementById("prompt").value = text; // sending it again confirms the revert
    }
    render();
    loadFiles();
  } catch (err) { showError(err.message); }
}

async function revertMove(path) {
  showError("");
  try {
    session = await call("POST", api(path), {});
    if (path === "/cleanup/") await loadMessages(false);
    render();
    loadFiles();
  } catch (err) { showError(err.message); }
}

function renderRevertBar() {
  const bar = document.getElementById("revert-bar");
  const r = session && session.revert;
  bar.hidden = !r;
  if (!r) return;
  const changes = r.changes || [];
  const list = el("ul", "changes");
  for (const c of changes) {
    const li = el("li", "change " + c.status);
    li.append(el("code", "", c.file), el("span", "muted", `${c.status}${c.binary ? " (binary)" : ""} +${c.additions} −${c.deletions}`));
    list.append(li);
  }
  const head = el("div", "bar-head");
  head.append(el("strong", "", "Reverted"), el("span", "muted", `${changes.length} file(s) restored — send a message to confirm`));
  const undo = el("button", "secondary", "Unrevert");
  undo.id = "unrevert";
  undo.type = "button";
  undo.addEventListener("click", () => revertMove("/unrevert/"));
  const confirm = el("button", "", "Confirm");
  confirm.id = "confirm-revert";
  confirm.type = "button";
  confirm.addEventListener("click", () => revertMove("/cleanup/"));
  head.append(undo, confirm);
  bar.replaceChildren(head, list);
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

function render() {
  usageLines();
  const box = document.getElementById("messages");
  const frag = document.createDocumentFragment();
  const dim = revertedIds();
  if (olderPage) frag.append(olderButton());
  for (const id of order) {
    const m = messages.get(id);
    if (!m) continue;
    const div = el("div", "msg " + m.role + (dim.has(id) ? " reverted" : ""));
    div.dataset.messageId = id;
    for (const pid of m.partIds) {
      const part = parts.get(pid);
      const node = renderPart(part);
      if (!node) continue;
      if (dim.has(pid)) node.classList.add("reverted");
      if (part.type === "tool" && m.role === "assistant") node.append(revertButton(id, pid));
      div.append(node);
    }
    if (m.error && m.error.message) div.append(el("div", "msg-error", m.error.message));
    const spent = lastOfRun.get(id);
    if (spent) div.append(el("div", "usage muted", spent));
    if (div.childNodes.length) {
      div.append(revertButton(id));
      const actions = messageActions(m, id === lastAnswerId());
      if (actions) div.append(actions);
      frag.append(div);
    }
  }
  const later = laterBranch();
  if (later) frag.append(later);
  box.replaceChildren(frag);
  renderContinueBar();
  renderRevertBar();
  updateControls();
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
  b.setAttribute("aria-label", title);
  b.addEventListener("click", onClick);
  return b;
}

function messageActions(m, isLastAnswer) {
  const bar = el("div", "actions");
  const siblings = children.get(m.parent_id || "") || [];
  if (siblings.length > 1) {
    const at = siblings.indexOf(m.id);
    const nav = el("span", "branches");
    const prev = button("‹", "Previous branch", () => switchHead(siblings[at - 1]), "nav prev");
    prev.disabled = at <= 0;
    const next = button("›", "Next branch", () => switchHead(siblings[at + 1]), "nav next");
    next.disabled = at >= siblings.length - 1;
    nav.append(prev, el("span", "count", `${at + 1}/${siblings.length}`), next);
    bar.append(nav);
  }
  const point = checkpoints.get(m.id);
  const idle = currentStatus !== "busy";
  if (point && idle) {
    bar.append(button("Fork from here", "Fork the session (chat and files) at this message", () => forkAt(m.id), "act fork-here"));
    bar.append(button("Continue from here", "Ask a new question from this point, as a new branch", () => armContinue(point, m.id), "act continue-here"));
    if (isLastAnswer && point.run_status !== "running" && point.run_status !== "pending") {
      bar.append(button("Regenerate", "Answer again from here (tools are not run again)", () => regenerate(point.run_id), "act regenerate"));
    }
  }
  return bar.childNodes.length ? bar : null;
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
    session = await call("POST", api("/head/"), { message_id: messageId });
    await loadMessages(false);
    await loadTree();
    render();
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
  if (!continueFrom) return;
  const m = messages.get(continueFrom.message_id);
  const text = m ? m.partIds.map((id) => parts.get(id)).filter((p) => p.type === "text").map((p) => p.text).join("").slice(0, 60) : "";
  bar.replaceChildren(
    el("span", "", `Continuing from message ${continueFrom.index} ${text ? "“" + text + "”" : ""} — your message starts a new branch.`),
    button("Cancel", "Stop continuing from that point", () => { continueFrom = null; renderContinueBar(); }, "secondary"),
  );
}

async function regenerate(runId) {
  showError("");
  try {
    await call("POST", `/api/runs/${runId}/regenerate/`, {});
  } catch (err) { showError(err.message); }
}

async function rollback() {
  const n = parseInt(document.getElementById("rollback-n").value, 10);
  document.getElementById("session-menu").open = false;
  showError("");
  try {
    session = await call("POST", api("/rollback/"), { num_turns: Number.isNaN(n) ? 0 : n });
    await loadMessages(false);
    await loadTree();
    render();
  } catch (err) { showError(err.message); }
}

async function loadLineage() {
  const data = await call("GET", api("/lineage/")).catch(() => null);
  const box = document.getElementById("lineage");
  if (!data) return;
  const chain = [...data.ancestors, data.session];
  const forks = data.forks;
  if (chain.length === 1 && !forks.length) {
    box.replaceChildren(el("p", "muted", "Not forked yet. “Fork from here” on a message, or Fork session in the menu."));
    return;
  }
  // A small picture: the chain of parents left to right, the forks of this session below it.
  const W = 150, H = 34, GAP = 22;
  const cols = Math.max(chain.length, 1);
  const width = Math.max(cols * (W + GAP), forks.length ? (chain.length - 1) * (W + GAP) + W + 10 : 0);
  const height = H + (forks.length ? forks.length * (H + 10) + GAP : 0) + 4;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `Lineage: ${chain.map((s) => s.title).join(" → ")}${forks.length ? `; ${forks.length} fork(s)` : ""}`);
  const node = (s, x, y, current) => {
    const a = document.createElementNS(ns, "a");
    a.setAttribute("href", `/sessions/${s.id}/`);
    const r = document.createElementNS(ns, "rect");
    Object.entries({ x, y, width: W, height: H, rx: 6, class: current ? "node current" : "node" }).forEach(([k, v]) => r.setAttribute(k, v));
    const t = document.createElementNS(ns, "text");
    Object.entries({ x: x + 8, y: y + H / 2 + 4 }).forEach(([k, v]) => t.setAttribute(k, v));
    t.textContent = (s.title || s.id).slice(0, 20);
    const title = document.createElementNS(ns, "title");
    title.textContent = s.title || s.id;
    a.append(r, t, title);
    svg.append(a);
  };
  const line = (x1, y1, x2, y2) => {
    const l = document.createElementNS(ns, "path");
    l.setAttribute("d", `M${x1} ${y1} C${x1 + 10} ${y1}, ${x2 - 10} ${y2}, ${x2} ${y2}`);
    l.setAttribute("class", "edge");
    svg.append(l);
  };
  chain.forEach((s, i) => {
    const x = i * (W + GAP);
    if (i) line(x - GAP, H / 2, x, H / 2);
    node(s, x, 0, i === chain.length - 1);
  });
  const cx = (chain.length - 1) * (W + GAP);
  forks.forEach((s, i) => {
    const y = H + GAP + i * (H + 10);
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", `M${cx + 12} ${H} V${y + H / 2} H${cx + 24}`);
    path.setAttribute("class", "edge");
    svg.append(path);
    const g = document.createElementNS(ns, "g");
    svg.append(g);
    node(s, cx + 24, y, false);
  });
  box.replaceChildren(svg);
}

async function loadChanges() {
  const list = await call("GET", api("/diff/")).catch(() => []);
  const ul = document.getElementById("changes");
  ul.replaceChildren(...list.map((d) => {
    const li = el("li", "change " + d.status);
    li.tabIndex = 0;
    li.setAttribute("role", "button");
    li.setAttribute("aria-label", `Show the diff of ${d.file}`);
    li.append(el("code", "", d.file), el("span", "muted", ` ${d.status} +${d.additions} −${d.deletions}`));
    const show = () => showDiff(d.file);
    li.addEventListener("click", show);
    li.addEventListener("keydown", (e) => { if (e.key === "Enter") show(); });
    return li;
  }));
  if (!list.length) ul.replaceChildren(el("li", "muted", "No changes yet."));
}

async function showDiff(file) {
  const view = document.getElementById("diff-view");
  const data = await call("GET", api(`/diff/?file=${encodeURIComponent(file)}`)).catch((err) => ({ patch: err.message }));
  view.replaceChildren(...(data.patch || "(no textual change)").split("\n").map((line) => {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
    return el("span", "line " + cls, line + "\n");
  }));
  view.hidden = false;
}

async function loadFiles() {
  const list = await call("GET", api("/files/")).catch(() => []);
  const ul = document.getElementById("files");
  ul.replaceChildren(...list.map((f) => {
    const li = el("li", "", f.path);
    li.addEventListener("click", async () => {
      const res = await fetch(api(`/files/${f.path}`), { credentials: "same-origin" });
      const view = document.getElementById("file-view");
      view.textContent = await res.text();
      view.hidden = false;
    });
    return li;
  }));
}

// The socket comes first, then the state over the API, then the events that came meanwhile.
// When the socket drops (a server restart), it is opened again, and once it is open the
// state is read again (it may have moved on while the socket was down).
let everOpened = false;
function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  return new Promise((resolve) => {
    const ws = new WebSocket(`${proto}://${location.host}/ws/sessions/${sessionId}/`);
    ws.onmessage = (msg) => {
      const ev = JSON.parse(msg.data);
      if (ready) handle(ev); else buffered.push(ev);
    };
    ws.onopen = () => {
      resolve();
      if (everOpened) restart();
      everOpened = true;
    };
    ws.onclose = (e) => {
      if (e.code === 4403) return showError("You may not see this session.");
      ready = false;
      setTimeout(connect, 1000);
    };
  });
}

async function restart() {
  for (let attempt = 0; attempt < 30; attempt++) {
    try {
      await start();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, Math.min(5000, 500 * 2 ** attempt)));
    }
  }
  showError("The server does not answer; reload the page.");
}

const PERMISSION_TOOLS = ["write", "append", "delete", "shell", "read", "list", "wait"];

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
    session = await call("PATCH", api("/"), { permissions: rules });
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

async function start() {
  session = await call("GET", api("/"));
  setStatus(session.status);
  renderPermissions();
  await renderModelPicker();
  await Promise.all([loadMessages(false), loadTree()]);
  ready = true;
  for (const ev of buffered.splice(0)) handle(ev);
  render();
  loadFiles();
  loadChanges();
  loadLineage();
}

document.getElementById("composer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = document.getElementById("prompt");
  const text = input.value.trim();
  if (!text) return;
  showError("");
  try {
    if (continueFrom) {
      await call("POST", `/api/runs/${continueFrom.run_id}/continue/`, { continue_from: continueFrom.index, input: text });
      continueFrom = null;
      renderContinueBar();
    } else {
      await call("POST", api("/runs/"), { messages: [{ role: "user", content: text }] });
    }
    input.value = "";
  } catch (err) {
    showError(err.message);
  }
});
document.getElementById("rollback").addEventListener("click", rollback);
document.getElementById("share").addEventListener("click", async () => {
  showError("");
  try {
    const include = document.getElementById("share-system-prompt").checked;
    const link = await call("POST", api("/share/"), { include_system_prompt: include });
    const box = document.getElementById("share-box");
    const url = document.getElementById("share-url");
    url.value = new URL(link.url, location.origin).href;
    box.hidden = false;
    url.select();
  } catch (err) { showError(err.message); }
});
document.getElementById("revoke-share").addEventListener("click", async () => {
  showError("");
  try {
    await call("DELETE", api("/share/"));
    document.getElementById("share-box").hidden = true;
    document.getElementById("share-url").value = "";
  } catch (err) { showError(err.message); }
});
document.getElementById("fork-session").addEventListener("click", () => forkAt(null));
document.getElementById("model-picker").addEventListener("change", async (e) => {
  showError("");
  try {
    session = await call("PATCH", api("/"), { model: e.target.value });
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
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) document.getElementById("send").click();
});
document.getElementById("resume").addEventListener("click", async () => {
  showError("");
  await call("POST", api("/runs/"), { mode: "resume" }).catch((err) => showError(err.message));
});
document.getElementById("stop").addEventListener("click", async () => {
  await call("POST", api("/abort/"), {}).catch((err) => showError(err.message));
});

await connect();
await start();
