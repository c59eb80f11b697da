// The chat's first two reads — the session and its newest page of messages — asked while the
// page's modules load and compile (a tenth of a second and more on a slow machine): the chat
// (static/chat/api.js, firstRead) takes these answers for its first start() instead of asking
// only then. An async classic script named first in the page's head: it runs as soon as it
// arrives (stylesheets do not hold it back), almost always before the modules; when not, the
// chat simply asks itself.
(() => {
  const match = location.pathname.match(/^\/sessions\/([^/]+)\/$/);
  if (!match) return;
  const FIRST_PAGE = 20; // as static/chat/api.js reads it
  const base = `/api/sessions/${match[1]}`;
  const get = (path) => fetch(`${base}${path}`, { credentials: "same-origin" });
  window.__firstRead = {
    sid: decodeURIComponent(match[1]),
    session: get("/"),
    messages: get(`/messages/?limit=${FIRST_PAGE}`),
  };
  // A read nobody takes (the page went elsewhere first) must not be an unhandled rejection.
  window.__firstRead.session.catch(() => {});
  window.__firstRead.messages.catch(() => {});
})();
