// A row of buttons as one tab stop (a WAI-ARIA toolbar with a roving tabindex): Tab enters
// the row on the button last used in it (the first at the start) and leaves it with the next
// Tab; the arrow keys, Home and End move inside. A message's moves are such a row, so
// reaching the message box does not take a Tab for every move of every message.
const ITEMS = "button:not(:disabled), a[href]";

function items(bar) {
  // A popup menu inside the row (the rewind modes) has its own keys.
  return [...bar.querySelectorAll(ITEMS)].filter((b) => !b.closest("[role=menu]"));
}

const used = new WeakMap(); // bar -> the button last used in it

function keep(bar, current) {
  const list = items(bar);
  const stop = list.includes(current) ? current : list[0];
  for (const b of list) b.tabIndex = b === stop ? 0 : -1;
}

export function rovingRefresh(bar) {
  // Buttons came into the row or left it: one tab stop still, the last used while it stays.
  keep(bar, used.get(bar));
}

export function roving(bar, label) {
  bar.setAttribute("role", "toolbar");
  bar.setAttribute("aria-label", label);
  keep(bar, null);
  bar.addEventListener("focusin", (e) => {
    if (!items(bar).includes(e.target)) return;
    used.set(bar, e.target);
    keep(bar, e.target);
  });
  bar.addEventListener("keydown", (e) => {
    const step = { ArrowRight: 1, ArrowLeft: -1, Home: -Infinity, End: Infinity }[e.key];
    if (step === undefined || e.altKey || e.ctrlKey || e.metaKey) return;
    const list = items(bar);
    const at = list.indexOf(e.target);
    if (at < 0) return;
    e.preventDefault();
    const next = step === -Infinity ? 0 : step === Infinity ? list.length - 1
      : (at + step + list.length) % list.length;
    list[next].focus();
  });
  return bar;
}
