// Rewind modes (docs/semantics.md §14.5). The "↺ revert to here" button reverts the conversation
// and the files, as it always did; the ▾ beside it opens a small menu of the three modes:
// conversation and files, conversation only (the files stay), files only (the conversation
// stays). A files-only rewind leaves no pending revert: a bar says what happened and offers
// Undo (POST …/unrevert/ puts the files back while nothing else happened since).
import { api, call, showError } from "./chat/api.js";
import { el } from "./chat/dom.js";
import { rewindState } from "./chat/store.js"; // `openMenu`: the menu shown, if any (one at a time)

export const MODES = [
  ["both", "Conversation and files", "Revert the conversation and the files to this point"],
  ["conversation", "Conversation only", "Move the conversation back to this point; the files stay as they are"],
  ["files", "Files only", "Put the files back as they were at this point; the conversation stays"],
];

function closeMenu() {
  if (!rewindState.openMenu) return;
  rewindState.openMenu.menu.hidden = true;
  rewindState.openMenu.toggle.setAttribute("aria-expanded", "false");
  rewindState.openMenu = null;
}

document.addEventListener("click", (e) => {
  if (rewindState.openMenu && !rewindState.openMenu.box.contains(e.target)) closeMenu();
});
document.addEventListener("keydown", (e) => {
  if (e.key !== "Escape" || !rewindState.openMenu) return;
  const { toggle } = rewindState.openMenu;
  closeMenu();
  toggle.focus();
});

// ``revert``: the existing ↺ button (mode both); ``pick(mode)`` does the revert; ``key``
// names the point, so a menu that is open when the message's bar is drawn again (a run's
// end, a refetch) stays open in the new bar instead of vanishing under the pointer.
export function withRewindModes(revert, pick, key = "") {
  const box = el("span", "rewind");
  const toggle = el("button", "act rewind-toggle", "▾");
  toggle.type = "button";
  toggle.title = "Rewind the conversation, the files, or both";
  toggle.setAttribute("aria-label", "Rewind options");
  toggle.setAttribute("aria-haspopup", "menu");
  toggle.setAttribute("aria-expanded", "false");
  const menu = el("div", "rewind-menu");
  menu.setAttribute("role", "menu");
  menu.hidden = true;
  for (const [mode, label, title] of MODES) {
    const item = el("button", `rewind-mode rewind-${mode}`, label);
    item.type = "button";
    item.title = title;
    item.setAttribute("role", "menuitem");
    item.dataset.mode = mode;
    item.addEventListener("click", () => { closeMenu(); pick(mode); });
    menu.append(item);
  }
  toggle.addEventListener("click", (e) => {
    e.stopPropagation();
    const shown = rewindState.openMenu && rewindState.openMenu.menu === menu;
    closeMenu();
    if (shown) return;
    menu.hidden = false;
    toggle.setAttribute("aria-expanded", "true");
    rewindState.openMenu = { box, menu, toggle, key };
    menu.querySelector("button").focus();
  });
  menu.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    e.preventDefault();
    const items = [...menu.querySelectorAll("button")];
    const at = items.indexOf(document.activeElement);
    items[(at + (e.key === "ArrowDown" ? 1 : items.length - 1)) % items.length].focus();
  });
  box.append(revert, toggle, menu);
  if (key && rewindState.openMenu && rewindState.openMenu.key === key) {
    menu.hidden = false;
    toggle.setAttribute("aria-expanded", "true");
    rewindState.openMenu = { box, menu, toggle, key };
  }
  return box;
}

// After a files-only rewind: what happened, and Undo.
export function showFilesRewound(session, { onUndone } = {}) {
  let bar = document.getElementById("files-rewound");
  if (!bar) {
    bar = el("div", "revert-bar files-rewound");
    bar.id = "files-rewound";
    bar.setAttribute("role", "status");
    document.getElementById("revert-bar").after(bar);
  }
  const changed = session.summary ? session.summary.files : 0;
  const head = el("div", "bar-head");
  head.append(
    el("strong", "", "Files rewound"),
    el("span", "muted", `the conversation is unchanged; ${changed} file(s) differ from the session's start`),
  );
  const undo = el("button", "secondary", "Undo");
  undo.id = "undo-files-rewind";
  undo.type = "button";
  undo.addEventListener("click", async () => {
    showError("");
    try {
      const next = await call("POST", api("/unrevert/"), {});
      hideFilesRewound();
      if (onUndone) onUndone(next);
    } catch (err) { showError(err.message); }
  });
  const close = el("button", "secondary", "Dismiss");
  close.type = "button";
  close.addEventListener("click", hideFilesRewound);
  head.append(undo, close);
  bar.replaceChildren(head);
  bar.hidden = false;
}

export function hideFilesRewound() {
  const bar = document.getElementById("files-rewound");
  if (bar) bar.hidden = true;
}
