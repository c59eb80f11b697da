// A shared conversation: read-only; clicking a file shows it as it was when shared. The
// assistant's text, sent as plain text, is rendered as Markdown here (the user's stays text).
import { renderInto } from "./markdown.js";

const token = document.getElementById("shared").dataset.token;
const view = document.getElementById("file-view");

for (const text of document.querySelectorAll("#messages .msg.assistant > .text, #messages .compaction > .text")) {
  renderInto(text, text.textContent);
}

async function show(path) {
  const res = await fetch(`/api/shared/${token}/files/${path.split("/").map(encodeURIComponent).join("/")}`, { credentials: "same-origin" });
  view.textContent = res.ok ? await res.text() : "This file cannot be shown.";
  view.hidden = false;
  view.scrollIntoView({ block: "nearest" }); // under the file list, in view
}

for (const button of document.querySelectorAll("#files button[data-path]")) {
  button.addEventListener("click", () => show(button.dataset.path));
}
