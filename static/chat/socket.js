// The socket, and opening a session over it. The socket comes first, then the state over the
// API, then the events that came meanwhile. When the socket drops (a server restart), it is
// opened again, and once it is open the state is read again (it may have moved on while the
// socket was down).
//
// While the socket is down the chat is offline: a bar says "Reconnecting…" and counts down to
// the next try (1 s, doubling up to 8 s; "Try now" tries at once), the badge says "offline"
// rather than a status nobody can know, and a send is refused before it is tried (the text
// stays in the box).
import { closeDrawers } from "../drawers.js";
import { closeViewers, loadChanges, loadFiles, loadLineage, loadShare } from "../panels.js";
import { markCurrent } from "../sidebar.js";
import { api, call, firstRead, notice, showError } from "./api.js";
import {
  LIVE, applyStored, currentSession, currentSessionId, forgetSession, isOffline, pathIds, redraw,
  setOfflineFlag, setSession, setSessionId, setStatus, socketState as sk, subscribe,
} from "./store.js";
import { loadMessages, loadTree } from "./sync.js";
import {
  NOT_SENT, focusPrompt, forgetQueued, loadBudget, loadTools, renderModelPicker,
  renderPermissions, showBadge, showTitle, updateControls,
} from "./controls.js";
import { flush } from "./render.js";
import { handle } from "./events.js";

function setOffline(on) {
  if (on === isOffline()) return;
  setOfflineFlag(on);
  document.getElementById("connection-bar").hidden = !on;
  clearInterval(sk.countdown);
  if (on) sk.countdown = setInterval(showCountdown, 250);
  else sk.retryDelay = 1000;
  if (!on && document.getElementById("error").textContent === NOT_SENT) showError("");
  showBadge();
  updateControls();
}

function showCountdown() {
  const left = Math.ceil((sk.retryAt - Date.now()) / 1000);
  document.getElementById("connection-text").textContent = sk.retryTimer && left > 0
    ? `Reconnecting… The server cannot be reached; next try in ${left} s.`
    : "Reconnecting…";
}

function scheduleReconnect() {
  clearTimeout(sk.retryTimer);
  sk.retryAt = Date.now() + sk.retryDelay;
  sk.retryTimer = setTimeout(() => { sk.retryTimer = 0; connect(); }, sk.retryDelay);
  sk.retryDelay = Math.min(sk.retryDelay * 2, 8000);
  setOffline(true);
  showCountdown();
}

function reconnectNow() {
  if (!sk.retryTimer) return; // a try is under way
  clearTimeout(sk.retryTimer);
  sk.retryTimer = 0;
  showCountdown();
  connect();
}

export function suspectConnection() {
  // A request got no answer while the socket looks open: it is closed, and its close starts
  // the reconnecting above.
  if (sk.socket && sk.socket.readyState === WebSocket.OPEN) sk.socket.close();
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const sid = currentSessionId();
  clearTimeout(sk.retryTimer);
  sk.retryTimer = 0;
  return new Promise((resolve) => {
    const ws = new WebSocket(`${proto}://${location.host}/ws/sessions/${sid}/`);
    sk.socket = ws;
    ws.onmessage = (msg) => {
      if (ws !== sk.socket) return;
      const ev = JSON.parse(msg.data);
      if (ev.type === "subscribed") {
        // Events reach this socket from here on (the server accepts a socket before it
        // joins the session's group): a socket that opened again catches up from now.
        const again = sk.everOpened;
        if (again) restart();
        sk.everOpened = true;
        resolve(again);
      }
      if (sk.ready) handle(ev); else sk.buffered.push(ev);
    };
    ws.onopen = () => {
      setOffline(false);
    };
    ws.onclose = (e) => {
      if (ws !== sk.socket) return; // a socket of a session we left
      if (e.code === 4403) return showError("You may not see this session.");
      sk.ready = false;
      scheduleReconnect();
    };
  });
}

async function restart() {
  // A socket that opened again starts its own catch-up; an older one stops.
  const mine = ++sk.restarts;
  for (let attempt = 0; attempt < 30; attempt++) {
    if (mine !== sk.restarts) return;
    try {
      await start(true);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, Math.min(5000, 500 * 2 ** attempt)));
    }
  }
  showError("The server does not answer; reload the page.");
}

async function start(again = false) {
  // The session and the newest page of messages come first and are shown at once; the tree
  // (branches, checkpoints: slower on a long session), the models and the panels follow.
  // Again (the socket reopened): what is shown is kept where the database agrees with it.
  const sid = currentSessionId();
  const [fresh, page] = await Promise.all([
    again ? call("GET", api("/")) : firstRead("session", () => call("GET", api("/"))),
    again && pathIds().length ? call("GET", api("/messages/")) : loadMessages(false),
  ]);
  if (sid !== currentSessionId()) return;
  if (page) applyStored(page, !LIVE.includes(fresh.status), new Set());
  setSession(fresh);
  showTitle();
  setStatus(currentSession().status);
  renderPermissions();
  if (!again) loadTools();
  sk.ready = true;
  for (const ev of sk.buffered.splice(0)) handle(ev);
  flush(true);
  if (!again) focusPrompt();
  loadTree().then(() => { if (sid === currentSessionId()) redraw(); }, () => {});
  loadBudget();
  renderModelPicker().catch(() => {});
  loadFiles();
  loadChanges();
  loadLineage();
  loadShare();
}

export async function switchSession(id, push = true) {
  // The sidebar opens another session in place: the socket, the state and the panels are
  // the new session's; the page (and the app) stays.
  if (id === currentSessionId()) return;
  if (push) history.pushState({ session: id }, "", `/sessions/${id}/`);
  const old = sk.socket;
  sk.socket = null;
  if (old) old.close();
  setSessionId(id);
  document.getElementById("chat").dataset.sessionId = id;
  sk.ready = false;
  sk.buffered = [];
  forgetSession(); // the messages, the tree, the moves armed
  forgetQueued();
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

export async function openChat() {
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
  const seen = currentSession();
  if (!seen) return;
  if (LIVE.includes(seen.status)) return restart();
  const sid = currentSessionId();
  const now = await call("GET", api("/")).catch(() => null);
  const known = currentSession(); // what the chat shows now (events since may have moved it)
  if (!now || !known || sid !== currentSessionId()) return;
  if (now.status !== known.status || now.head_message_id !== known.head_message_id
    || now.updated_at !== known.updated_at) restart();
}

export function initSocket() {
  subscribe("unreachable", suspectConnection); // a request got no answer (api.js)
  subscribe("open-session", (id) => switchSession(id)); // the sidebar's choice
  document.getElementById("reconnect-now").addEventListener("click", reconnectNow);
  window.addEventListener("online", reconnectNow);
  window.addEventListener("offline", suspectConnection);
  window.addEventListener("popstate", () => {
    const match = location.pathname.match(/^\/sessions\/([^/]+)\/$/);
    if (match) switchSession(match[1], false);
  });
}
