// The chat page's script: it starts the chat's modules and opens the session. Each job is in
// one module of static/chat/:
//   api.js       the calls to the API (which session, the CSRF token, the error line)
//   store.js     what the chat knows: the session, the messages and parts of the path, versions
//   sync.js      keeping that equal to the database: pages, reload, refetch, resync, `seq` gaps
//   socket.js    the socket (reconnecting, offline) and opening a session over it
//   events.js    what each live event does
//   render.js    drawing the conversation (a frame at a time, only what changed)
//   parts.js     how a part looks (text, tool cards, approvals)
//   moves.js     a message's moves (branches, edit, fork, continue, regenerate, revert)
//   controls.js  the composer, the badge, the session menu, the budget
// The modules import the functions they need from each other (a button that is drawn calls a
// move that draws again); none of them runs another's code while it loads: it all starts here.
import { initAlternatives } from "./alternatives.js";
import { initDrawers } from "./drawers.js";
import { initShare } from "./panels.js";
import { initRepository } from "./repository.js";
import { initSidebar } from "./sidebar.js";
import { call, currentSessionId, setSessionId, showError, whenUnreachable } from "./chat/api.js";
import { initControls } from "./chat/controls.js";
import { initMoves } from "./chat/moves.js";
import { initRender } from "./chat/render.js";
import { initSocket, openChat, suspectConnection, switchSession } from "./chat/socket.js";
import { watchQuiet } from "./chat/sync.js";

setSessionId(document.getElementById("chat").dataset.sessionId);
whenUnreachable(suspectConnection);
watchQuiet();
initRender();
initControls();
initSocket();
initMoves();
initShare();
initDrawers();
initRepository(currentSessionId);
initAlternatives();

await openChat();
// The session list comes after the conversation (it is not what the reader came for).
initSidebar({ call, showError, open: (id) => switchSession(id), current: currentSessionId });
