// The colour scheme: the browser's (prefers-color-scheme) unless the reader chose one with the
// header's switch, which is remembered (localStorage "theme": "light" | "dark"). A classic
// script in <head>, so the page is drawn in its scheme from the first paint.
(() => {
  const KEY = "theme";
  const media = window.matchMedia("(prefers-color-scheme: dark)");
  let kept = null; // the choice, where the browser refuses storage (this page only)
  const chosen = () => {
    try { return localStorage.getItem(KEY); } catch { return kept; }
  };
  const choose = (value) => {
    kept = value;
    try {
      if (value) localStorage.setItem(KEY, value); else localStorage.removeItem(KEY);
    } catch { /* kept for this page */ }
  };
  const browser = () => (media.matches ? "dark" : "light");
  const scheme = () => {
    const c = chosen();
    return c === "light" || c === "dark" ? c : browser();
  };
  const apply = () => {
    const dark = scheme() === "dark";
    document.documentElement.dataset.theme = dark ? "dark" : "light";
    const button = document.getElementById("theme-switch");
    if (button) {
      // The state said in words too: "auto" while the browser's setting is followed, else
      // the reader's choice, "on" or "off" (the phone's header shows the icon and this word).
      const choice = chosen() === "light" || chosen() === "dark" ? chosen() : "auto";
      button.setAttribute("aria-pressed", String(dark));
      button.dataset.choice = choice;
      const state = button.querySelector(".theme-state");
      if (state) state.textContent = choice === "auto" ? "auto" : dark ? "on" : "off";
      const now = button.querySelector(".theme-now");
      if (now) now.textContent = choice === "auto" ? ` (${dark ? "on" : "off"})` : "";
      button.title = choice !== "auto" ? "Dark mode: your choice (click again to follow the browser)"
        : "Dark mode: following the browser's setting";
    }
  };
  apply();
  media.addEventListener("change", apply);
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme-switch");
    if (!button) return;
    button.hidden = false;
    // "Dark mode" (hidden on a phone) and its state, after the icon.
    const words = document.createElement("span");
    words.className = "theme-words";
    words.textContent = "Dark mode:";
    const state = document.createElement("span");
    state.className = "theme-state";
    for (const node of [...button.childNodes]) if (node.nodeType === Node.TEXT_NODE) node.remove();
    const now = document.createElement("span");
    now.className = "theme-now";
    button.append(words, state, now);
    button.addEventListener("click", () => {
      const next = scheme() === "dark" ? "light" : "dark";
      choose(next === browser() ? null : next); // the browser's own scheme: follow it again
      apply();
    });
    apply();
  });
})();
