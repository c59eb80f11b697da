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
    error: m.error, run_id: m.run_id,
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
  parts.set(p.id, { ...(known || {}), ...p });
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
  const have = part.text || "";
  if (ev.offset > have.length) return scheduleRefetch();
  if (ev.offset + ev.text.length <= have.length) return; // already have it
  part.text = have + ev.text.slice(have.length - ev.offset);
}

function scheduleRefetch() {
  if (refetchTimer) return;
  refetchTimer = setTimeout(async () => {
    refetchTimer = null;
    await loadMessages(true);
    render();
  }, 250);
}

async function loadMessages(merge) {
  const list = await call("GET", api("/messages/"));
  if (!merge) { messages.clear(); parts.clear(); order = []; }
  const ids = list.map((m) => m.id);
  for (const m of list) {
    upsertMessage({ ...m, parts: [] });
    for (const p of m.parts) upsertPart(p, true);
  }
  if (!merge) order = ids;
}

function handle(ev) {
  switch (ev.type) {
    case "text-delta":
    case "reasoning-delta":
      applyDelta(ev); break;
    case "message.updated": upsertMessage(ev.message); break;
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
    case "session.diff": loadFiles(); break;
    case "session.updated":
      session = ev.session;
      setStatus(ev.session.status);
      if (ev.session.head_message_id && !messages.has(ev.session.head_message_id)) scheduleRefetch();
      break;
    case "run.updated":
      if (ev.run.status === "error" && ev.run.error) showError(ev.run.error.message);
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
  return last.partIds.some((id) => {
    const p = parts.get(id);
    return p.type === "tool" && ["pending", "running"].includes((p.state || {}).status);
  });
}

function updateControls() {
  const busy = currentStatus === "busy";
  document.getElementById("stop").hidden = !busy;
  document.getElementById("resume").hidden = busy || !lastTurnUnfinished();
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function renderPart(p) {
  if (p.type === "text") return el("div", "text", p.text);
  if (p.type === "reasoning") return el("div", "reasoning", p.text);
  if (p.type === "tool") {
    const box = el("div", "tool");
    box.dataset.partId = p.id;
    const s = p.state || {};
    const head = el("div");
    const meta = s.metadata || {};
    const label = meta.interrupted ? `interrupted (${meta.reason || "?"})` : s.status || "";
    head.append(el("span", "name", p.tool), el("span", "state " + (s.status || ""), label));
    const input = s.input || {};
    head.append(el("span", "muted", input.path ?? input.command ?? (input.seconds !== undefined ? `${input.seconds}s` : "")));
    box.append(head);
    if (s.status === "completed" && s.output) box.append(el("pre", "output", s.output));
    if (s.status === "error") box.append(el("pre", "error", s.error || "error"));
    return box;
  }
  if (p.type === "patch") return el("div", "patch", "changed: " + (p.files || []).join(", "));
  return null;
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

function render() {
  const box = document.getElementById("messages");
  const frag = document.createDocumentFragment();
  const dim = revertedIds();
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
    if (div.childNodes.length) {
      div.append(revertButton(id));
      frag.append(div);
    }
  }
  box.replaceChildren(frag);
  renderRevertBar();
  updateControls();
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

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${proto}://${location.host}/ws/sessions/${sessionId}/`);
  ws.onmessage = (msg) => {
    const ev = JSON.parse(msg.data);
    if (ready) handle(ev); else buffered.push(ev);
  };
  ws.onclose = (e) => {
    if (e.code === 4403) return showError("You may not see this session.");
    setTimeout(async () => { ready = false; connect(); await start(); }, 1000);
  };
  return new Promise((resolve) => { ws.onopen = resolve; });
}

async function start() {
  session = await call("GET", api("/"));
  setStatus(session.status);
  await loadMessages(false);
  ready = true;
  for (const ev of buffered.splice(0)) handle(ev);
  render();
  loadFiles();
}

document.getElementById("composer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = document.getElementById("prompt");
  const text = input.value.trim();
  if (!text) return;
  showError("");
  try {
    await call("POST", api("/runs/"), { messages: [{ role: "user", content: text }] });
    input.value = "";
  } catch (err) {
    showError(err.message);
  }
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
