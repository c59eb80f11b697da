// Small helpers every part of the chat page draws with: an element, an action button, and the
// one time format of the chat. No state.

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function button(label, title, onClick, cls = "act") {
  const b = el("button", cls, label);
  b.type = "button";
  b.title = title;
  // The name starts with what the button shows (a word label), then says what it does.
  const says = /\w/.test(label) && !title.toLowerCase().includes(label.toLowerCase());
  b.setAttribute("aria-label", says ? `${label}: ${title}` : title);
  b.addEventListener("click", onClick);
  return b;
}

export function when(iso) {
  // The one time format of the chat (the budget line, a refusal, a share's pin): the
  // browser's locale, with the zone named; the date only when it is not today.
  const at = new Date(iso);
  const today = at.toDateString() === new Date().toDateString();
  return at.toLocaleString(undefined, {
    ...(today ? {} : { year: "numeric", month: "short", day: "numeric" }),
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });
}
