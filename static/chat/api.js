// The chat's calls to the API: which session they address (the store's: the sidebar switches
// it in place), the request with its CSRF token, what an answer or its absence means (no
// answer at all: "unreachable", which socket.js hears), the first reads that static/early.js
// asked ahead, and the lines under the conversation (the error, a passing notice).
import { when } from "./dom.js";
import { apiState, currentSessionId, emit } from "./store.js";

export function api(path) {
  return `/api/sessions/${currentSessionId()}${path}`;
}

function csrf() {
  const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

export const UNREACHABLE = "The server cannot be reached right now; the chat reconnects by itself.";

export async function call(method, path, body) {
  return answer(fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  }));
}

// The newest page the chat reads when it opens: a screenful and more (older pages come as the
// reader scrolls up), not the API's default 50 to lay out before the last one shows.
export const FIRST_PAGE = 20; // as static/early.js asks

export function firstRead(kind, otherwise) {
  // The chat's first reads were asked by static/early.js while the modules loaded: their
  // answers serve the first start() of that session, once; anything else asks anew.
  const early = window.__firstRead;
  const pending = early && early.sid === currentSessionId() ? early[kind] : null;
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
    emit("unreachable");
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

export function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text || "";
  box.hidden = !text;
}

export function notice(text) {
  // A passing word (a regenerate that came out the same): shown a few seconds.
  const box = document.getElementById("notice");
  box.textContent = text;
  box.hidden = !text;
  clearTimeout(apiState.noticeTimer);
  if (text) apiState.noticeTimer = setTimeout(() => { box.hidden = true; }, 6000);
}
