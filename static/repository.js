// A session's repository on the chat page: where its files came from (the header's source
// line), the clone's progress while it is "preparing" (session.prepare events; Cancel
// deletes the session), and Push in the session menu. It hears of the session through the
// store ("session") and is handed the clone's events (events.js); everything else it does
// through the API.
import { currentSessionId, repositoryState, subscribe } from "./chat/store.js";

const $ = (id) => document.getElementById(id);

function csrf() {
  const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

async function call(method, path, body) {
  const response = await fetch(`/api/sessions/${encodeURIComponent(currentSessionId())}${path}`, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let answer = null;
  try { answer = await response.json(); } catch { answer = null; }
  return { ok: response.ok, status: response.status, answer };
}

function renderSource(session) {
  const source = session.source || { type: "empty" };
  const line = $("source");
  if (!line) return;
  line.classList.toggle("error", Boolean(source.error));
  if (source.type === "git") {
    const name = source.branch || source.ref;
    const ref = name ? ` · ${name}` : "";
    const at = source.commit ? ` @ ${source.commit.slice(0, 12)}` : "";
    line.textContent = `⎇ ${source.url}${ref}${at}` + (source.error ? ` — ${source.error}` : "");
    line.title = source.commit || "";
    line.hidden = false;
  } else if (source.type === "upload") {
    line.textContent = `Uploaded: ${source.name || "a folder"}`;
    line.hidden = false;
  } else {
    line.hidden = true;
  }
  const push = $("push-box");
  if (push) push.hidden = !(source.type === "git" && source.commit);
  const now = session.status === "preparing";
  $("prepare-bar").hidden = !now;
  // The clone is done: show its message and files whole.
  if (repositoryState.preparing === session.id && !now) window.location.reload();
  repositoryState.preparing = now ? session.id : null; // the session last shown "preparing"
}

export function showPrepare(ev) {
  const bar = $("prepare-bar");
  bar.hidden = false;
  $("prepare-text").textContent = `Cloning — ${ev.phase}: ${ev.done.toLocaleString()} of ${ev.total.toLocaleString()}`;
  const progress = $("prepare-progress");
  progress.max = Math.max(ev.total, 1);
  progress.value = ev.done;
}

async function loadCredentials() {
  const select = $("push-credential");
  const response = await fetch("/api/credentials/", { credentials: "same-origin" });
  if (!response.ok) return;
  const rows = await response.json();
  select.replaceChildren(new Option("the session's credential", ""));
  for (const row of rows) select.append(new Option(`${row.name} (${row.host}:${row.port})`, row.id));
}

export function initRepository() {
  subscribe("session", (session) => { if (session) renderSource(session); });
  $("prepare-cancel")?.addEventListener("click", async () => {
    if (!window.confirm("Cancel the clone and delete this session?")) return;
    const done = await call("DELETE", "/");
    if (done.ok) window.location.assign("/");
  });
  const push = $("push");
  if (!push) return;
  $("session-menu").addEventListener("toggle", () => {
    if ($("session-menu").open && !$("push-box").hidden) loadCredentials();
  });
  push.addEventListener("click", async () => {
    const result = $("push-result");
    const branch = $("push-branch").value.trim();
    if (!branch) { result.textContent = "Name a branch to push to."; return; }
    push.disabled = true;
    result.textContent = "Pushing…";
    try {
      const done = await call("POST", "/push/", {
        branch, credential_id: $("push-credential").value || null,
      });
      result.textContent = done.ok
        ? `Pushed ${done.answer.commit.slice(0, 12)} to ${done.answer.branch} at ${done.answer.remote}`
        : (done.answer?.error?.message || `The push failed (HTTP ${done.status}).`);
      result.classList.toggle("error", !done.ok);
    } finally {
      push.disabled = false;
    }
  });
}
