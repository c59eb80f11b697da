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
      button.setAttribute("aria-pressed", String(dark));
      button.title = chosen() ? "Dark mode: your choice (click again to follow the browser)"
        : "Dark mode: following the browser's setting";
    }
  };
  apply();
  media.addEventListener("change", apply);
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme-switch");
    if (!button) return;
    button.hidden = false;
    button.addEventListener("click", () => {
      const next = scheme() === "dark" ? "light" : "dark";
      choose(next === browser() ? null : next); // the browser's own scheme: follow it again
      apply();
    });
    apply();
  });
})();
