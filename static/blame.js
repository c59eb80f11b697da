// Blame in the file viewer (issue 27, docs/semantics.md §14.4): a gutter beside the file's lines
// that names, for each run of lines, the turn that last changed it ("turn 3", as the chat counts
// turns: its user messages; the API's `turn`), and its tool where the viewer has room; a click
// scrolls to that message in the conversation and highlights it. Lines from before the
// session's first snapshot (a clone, an upload) say so. A file blame cannot read (binary,
// too large, not in the snapshots yet) stays as plain text.
import { api, call, showError } from "./chat/api.js";
import { el } from "./chat/dom.js";

function label(run) {
  if (!run.message_id) return "start"; // short: a quarter of a narrow viewer (the title says it whole)
  return `turn ${run.turn ?? "?"}`;
}

function title(run, lines) {
  if (!run.message_id) return `${lines}: from before the session's first snapshot (a clone or an upload)`;
  const when = run.created_at ? new Date(run.created_at).toLocaleString() : "";
  const step = run.step === null || run.step === undefined ? "" : `, step ${run.step + 1}`;
  return `${lines}: ${run.tool || "a change"} in turn ${run.turn ?? "?"}${step}${when ? `, ${when}` : ""}. Click to show the message.`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function goToMessage(messageId) {
  // The message may be on an older page of the conversation: load pages until it shows.
  for (let i = 0; i < 30; i++) {
    const node = document.querySelector(`.msg[data-message-id="${CSS.escape(messageId)}"]`);
    if (node) {
      node.scrollIntoView({ block: "center", behavior: "smooth" });
      node.classList.add("blame-target");
      node.setAttribute("tabindex", "-1");
      node.focus({ preventScroll: true });
      setTimeout(() => node.classList.remove("blame-target"), 2500);
      return true;
    }
    const older = document.getElementById("load-older");
    if (!older || !older.isConnected) break;
    older.click();
    await sleep(250);
  }
  showError("That message is not in the conversation shown (it may be on another branch).");
  return false;
}

export async function addBlame(pre, path, text) {
  // The gutter goes in beside the text without changing it: empty buttons (their labels are
  // drawn by CSS from data-label) in a column laid over the pre's left padding, one per run
  // of lines, as tall as the run; the pre's text stays exactly the file's.
  if (/[\u0000\uFFFD]/.test(text)) return false; // binary: blame reads text only
  const encoded = path.split("/").map(encodeURIComponent).join("/");
  let runs;
  try {
    runs = await call("GET", api(`/blame/${encoded}`));
  } catch {
    return false; // too large, or not in the snapshots yet: the plain text stays
  }
  const lines = text.split("\n");
  if (text.endsWith("\n")) lines.pop();
  const last = runs.length ? runs[runs.length - 1].end : 0;
  // Another file opened meanwhile, or the worktree moved on since the last snapshot.
  if (pre.dataset.path !== path || pre.textContent !== text || last !== lines.length) return false;
  const column = el("div", "blame-gutters");
  column.setAttribute("role", "group");
  column.setAttribute("aria-label", "Which step last changed each line");
  for (const run of runs) {
    const span = run.start === run.end ? `line ${run.start}` : `lines ${run.start}–${run.end}`;
    const gutter = el(run.message_id ? "button" : "span", "blame-gutter" + (run.message_id ? "" : " before"));
    gutter.dataset.label = label(run);
    gutter.dataset.tool = run.message_id ? run.tool || "change" : ""; // shown when there is room
    gutter.dataset.messageId = run.message_id || "";
    gutter.dataset.start = String(run.start);
    gutter.style.top = `calc(${run.start - 1} * var(--blame-line))`;
    gutter.style.height = `calc(${run.end - run.start + 1} * var(--blame-line))`;
    gutter.title = title(run, span);
    gutter.setAttribute("aria-label", `${span}: ${label(run)}${run.message_id ? `, ${run.tool || "a change"}` : ""}`);
    if (run.message_id) {
      gutter.type = "button";
      gutter.addEventListener("click", () => goToMessage(run.message_id));
    }
    column.append(gutter);
  }
  pre.classList.add("blamed");
  pre.prepend(column);
  return true;
}
