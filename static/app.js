// The chat page's script: it starts the chat's modules and opens the session. Each job is in
// one module of static/chat/ (beside it, the features of static/):
//   store.js     the chat's state, all of it, and the events that say it changed
//   api.js       the calls to the API (for the store's session, the CSRF token, the error line)
//   sync.js      keeping the store equal to the database: pages, reload, refetch, resync, `seq`
//   moves.js     a message's moves (branches, edit, fork, continue, regenerate, revert)
//   parts.js     how a part looks (text, tool cards, approvals)
//   controls.js  the composer, the badge, the session menu, the budget
//   render.js    drawing the conversation (a frame at a time, only what changed)
//   events.js    what each live event does
//   socket.js    the socket (reconnecting, offline) and opening a session over it
//
// Layers: a module imports only from layers below its own (tests/test_js_structure.py reads
// this list), so no two modules import each other. A lower module that needs a higher one to
// act goes through the store: it changes the state, or emits an event the higher module
// subscribed to ("redraw" for render.js, "session" for repository.js, "status" for controls.js,
// "unreachable" and "open-session" for socket.js). None of them runs another's code while it
// loads: it all starts here.
//   0  chat/dom.js roving.js markdown.js drawers.js
//   1  chat/store.js
//   2  chat/api.js
//   3  chat/sync.js blame.js compare.js rewind.js repository.js sidebar.js
//   4  panels.js alternatives.js
//   5  chat/moves.js
//   6  chat/parts.js chat/controls.js
//   7  chat/render.js
//   8  chat/events.js
//   9  chat/socket.js
//   10 app.js
import { initAlternatives } from "./alternatives.js";
import { initDrawers } from "./drawers.js";
import { initShare } from "./panels.js";
import { initRepository } from "./repository.js";
import { initSidebar } from "./sidebar.js";
import { initControls } from "./chat/controls.js";
import { initMoves } from "./chat/moves.js";
import { initRender } from "./chat/render.js";
import { initSocket, openChat } from "./chat/socket.js";
import { setSessionId } from "./chat/store.js";
import { watchQuiet } from "./chat/sync.js";

setSessionId(document.getElementById("chat").dataset.sessionId);
watchQuiet();
initRender();
initControls();
initSocket();
initMoves();
initShare();
initDrawers();
initRepository();
initAlternatives();

await openChat();
// The session list comes after the conversation (it is not what the reader came for).
initSidebar();
