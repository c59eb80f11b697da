// What opens over the chat and how it closes. On a narrow window the session list (≤ 1100 px)
// and the Files panel (≤ 800 px) are drawers: a toggle in the chat's head opens one, and a
// tap outside it (on the backdrop), Escape or its Close button closes it. The session menu (⋯)
// closes on Escape and on a click outside it. At most one of them is open at a time, so a
// drawer never opens over the menu, nor the menu over a drawer.
const DRAWERS = {
  sidebar: { cls: "sidebar-open", toggle: "sidebar-toggle", focus: "sidebar-search" },
  files: { cls: "files-open", toggle: "files-toggle", focus: null },
};

const chat = () => document.getElementById("chat");
const menu = () => document.getElementById("session-menu");

export function openDrawer() {
  return Object.keys(DRAWERS).find((name) => chat().classList.contains(DRAWERS[name].cls)) || null;
}

export function closeDrawers({ focusToggle = false } = {}) {
  const open = openDrawer();
  for (const [name, d] of Object.entries(DRAWERS)) {
    chat().classList.remove(d.cls);
    document.getElementById(d.toggle).setAttribute("aria-expanded", "false");
    if (focusToggle && name === open) document.getElementById(d.toggle).focus();
  }
  document.getElementById("drawer-backdrop").hidden = true;
}

function showDrawer(name) {
  const d = DRAWERS[name];
  const wasOpen = openDrawer() === name;
  closeDrawers();
  if (wasOpen) return;
  menu().open = false;
  chat().classList.add(d.cls);
  document.getElementById(d.toggle).setAttribute("aria-expanded", "true");
  document.getElementById("drawer-backdrop").hidden = false;
  const first = d.focus ? document.getElementById(d.focus)
    : document.querySelector(`#${name === "files" ? "files-panel" : name} .drawer-close`);
  if (first) first.focus();
}

export function initDrawers() {
  for (const name of Object.keys(DRAWERS)) {
    document.getElementById(DRAWERS[name].toggle).addEventListener("click", () => showDrawer(name));
  }
  for (const b of document.querySelectorAll(".drawer-close")) {
    b.addEventListener("click", () => closeDrawers({ focusToggle: true }));
  }
  document.getElementById("drawer-backdrop").addEventListener("click", () => closeDrawers());
  // The menu opening closes any drawer (the two never cover each other).
  menu().addEventListener("toggle", () => { if (menu().open) closeDrawers(); });
  document.addEventListener("click", (e) => {
    // The path as it was when the click began: a control the click redrew is still inside.
    if (menu().open && !e.composedPath().includes(menu())) menu().open = false;
  });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || e.defaultPrevented) return;
    if (menu().open) {
      e.preventDefault();
      menu().open = false;
      menu().querySelector("summary").focus();
    } else if (openDrawer()) {
      e.preventDefault();
      closeDrawers({ focusToggle: true });
    }
  });
  // A window grown past the drawers' width shows the panels in place: nothing stays "open".
  for (const width of [800, 1100]) {
    matchMedia(`(max-width: ${width}px)`).addEventListener("change", () => closeDrawers());
  }
}
