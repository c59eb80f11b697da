// A shared conversation: read-only; clicking a file shows it as it was when shared.
const token = document.getElementById("shared").dataset.token;
const view = document.getElementById("file-view");

async function show(path) {
  const res = await fetch(`/api/shared/${token}/files/${path.split("/").map(encodeURIComponent).join("/")}`, { credentials: "same-origin" });
  view.textContent = res.ok ? await res.text() : "This file cannot be shown.";
  view.hidden = false;
}

for (const li of document.querySelectorAll("#files li[data-path]")) {
  li.addEventListener("click", () => show(li.dataset.path));
  li.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") show(li.dataset.path); });
}
