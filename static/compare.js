// Compare two points of the session (GET …/compare/): the two conversations side by side from
// their common ancestor, the files that differ with their +/− counts, and a file's diff,
// unified or side by side (drawn from the unified patch). Reached from a message's moves
// ("Compare with…") and from the branch switcher ‹ n/m ›. A modal <dialog>: Escape closes it.
//
// On a message whose parent has several children, the current branch (the head) is compared
// with another branch's newest leaf; on any other message, that point with the head. From the
// lineage panel, a fork, an alternative or the session this one was forked from is compared
// with this one (`other`: both heads, from the fork point).
import { api, call } from "./chat/api.js";
import { el } from "./chat/dom.js";
import { compareState as cmp } from "./chat/store.js"; // the dialog, what it shows, the diff's mode

export function compareButton(m, cls = "act compare-with") {
  const b = el("button", cls, cls.includes("nav") ? "⇄" : "Compare with…");
  b.type = "button";
  b.title = "Compare this point with another branch or the head (conversation and files)";
  b.setAttribute("aria-label", cls.includes("nav")
    ? "Compare the branches"
    : "Compare with…: compare this point with another branch or the head");
  b.addEventListener("click", () => openCompare(m));
  return b;
}

function ensureDialog() {
  if (cmp.dialog) return cmp.dialog;
  cmp.dialog = el("dialog", "compare-dialog");
  cmp.dialog.id = "compare";
  cmp.dialog.setAttribute("aria-labelledby", "compare-title");
  const head = el("div", "compare-head");
  const title = el("h2", "", "Compare");
  title.id = "compare-title";
  const pick = el("label", "compare-pick");
  pick.hidden = true;
  const select = el("select");
  select.id = "compare-other";
  pick.append("with ", select);
  select.addEventListener("change", () => load(cmp.options[Number(select.value)]));
  const close = el("button", "secondary small", "Close");
  close.type = "button";
  close.setAttribute("aria-label", "Close the comparison");
  close.addEventListener("click", () => cmp.dialog.close());
  head.append(title, pick, close);
  const base = el("p", "muted compare-base");
  const sides = el("div", "compare-sides");
  const files = el("div", "compare-files");
  const diff = el("div", "compare-diff");
  cmp.dialog.append(head, base, sides, files, diff);
  cmp.dialog.addEventListener("click", (e) => { if (e.target === cmp.dialog) cmp.dialog.close(); });
  document.body.append(cmp.dialog);
  return cmp.dialog;
}

function newestLeaf(children, id) {
  // As the server's head switch does: the newest message without children under `id`.
  let newest = null;
  const stack = [id];
  while (stack.length) {
    const mid = stack.pop();
    const below = children.get(mid) || [];
    if (below.length) stack.push(...below);
    else if (newest === null || mid > newest) newest = mid;
  }
  return newest;
}

async function choices(m) {
  // [{label, a, b}]: the other branches at this message's fork (their newest leaves, against
  // the head), else this point against the head.
  const [tree, session] = await Promise.all([
    call("GET", api("/tree/")),
    call("GET", api("/")),
  ]);
  const children = new Map();
  for (const t of tree) {
    if (t.hidden) continue;
    const key = t.parent_id || "";
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(t.id);
  }
  const siblings = children.get(m.parent_id || "") || [];
  const head = session.head_message_id;
  const out = [];
  if (siblings.length > 1 && head) {
    siblings.forEach((s, i) => {
      if (s === m.id) return;
      const name = `branch ${i + 1}/${siblings.length}`;
      out.push({ label: `${name} (its newest message)`, a: head, b: newestLeaf(children, s),
        names: [`this branch (${siblings.indexOf(m.id) + 1}/${siblings.length})`, name] });
    });
  }
  if (m.id !== head && head) {
    out.push({ label: "the head (this point → now)", a: m.id, b: head, names: ["this point", "the head"] });
  }
  return out;
}

function query({ a, b, other }) {
  const q = new URLSearchParams();
  if (a) q.set("a", a);
  if (b) q.set("b", b);
  if (other) q.set("other", other);
  return q.toString();
}

// The lineage panel asks for a session compared with this one (an event: panels.js draws the
// panel and does not import this module).
document.addEventListener("compare-session", (e) => openCompareWith(e.detail));

export async function openCompareWith(s) {
  const d = ensureDialog();
  const title = s.title || s.id;
  const kind = s.lineage_kind === "alternative" ? "alternative" : "session";
  cmp.options = [{ label: title, a: null, b: null, other: s.id,
    names: ["this session", `${kind} “${title.length > 40 ? title.slice(0, 39) + "…" : title}”`] }];
  d.querySelector("#compare-other").replaceChildren();
  d.querySelector(".compare-pick").hidden = true;
  d.querySelector(".compare-sides").replaceChildren(el("p", "muted", "Loading…"));
  d.querySelector(".compare-files").replaceChildren();
  d.querySelector(".compare-diff").replaceChildren();
  d.querySelector(".compare-base").textContent = "";
  if (!d.open) d.showModal();
  await load(cmp.options[0]);
}

export async function openCompare(m) {
  const d = ensureDialog();
  d.querySelector(".compare-sides").replaceChildren(el("p", "muted", "Loading…"));
  d.querySelector(".compare-files").replaceChildren();
  d.querySelector(".compare-diff").replaceChildren();
  d.querySelector(".compare-base").textContent = "";
  if (!d.open) d.showModal();
  try {
    cmp.options = await choices(m);
  } catch (err) {
    d.querySelector(".compare-sides").replaceChildren(el("p", "error", err.message));
    return;
  }
  const select = d.querySelector("#compare-other");
  select.replaceChildren(...cmp.options.map((o, i) => {
    const opt = el("option", "", o.label);
    opt.value = String(i);
    return opt;
  }));
  select.parentElement.hidden = cmp.options.length < 2;
  if (!cmp.options.length) {
    d.querySelector(".compare-sides").replaceChildren(
      el("p", "muted", "This is the newest message of the only branch: compare from an earlier message or a branch switcher ‹ n/m ›."));
    return;
  }
  await load(cmp.options[0]);
}

async function load({ a, b, other, names }) {
  const d = ensureDialog();
  let data;
  try {
    data = await call("GET", api(`/compare/?${query({ a, b, other })}`));
  } catch (err) {
    d.querySelector(".compare-sides").replaceChildren(el("p", "error", err.message));
    return;
  }
  cmp.shown = { a, b, other };
  d.querySelector(".compare-base").textContent = data.base
    ? (other ? "From the fork point: both sessions share every message up to it."
      : "From their common ancestor: both sides share every message up to it.")
    : (other ? "The two sessions share no message: compared from their start."
      : "The two sides share no message (an edited first prompt).");
  d.querySelector(".compare-sides").replaceChildren(
    side("A", data.a, names[0]),
    side("B", data.b, names[1]),
  );
  renderFiles(data);
  d.querySelector(".compare-diff").replaceChildren();
  if (data.files.length) showFile(data.files[0].path);
}

function side(name, data, what) {
  const box = el("section", "compare-side");
  box.setAttribute("aria-label", `Side ${name}`);
  box.append(el("h3", "", `${name} · ${what} · ${data.messages.length} message${data.messages.length === 1 ? "" : "s"}`));
  const list = el("div", "compare-messages");
  if (!data.messages.length) list.append(el("p", "muted", "Nothing after the common ancestor."));
  for (const m of data.messages) list.append(message(m));
  if (data.truncated) list.append(el("p", "muted", "… more messages follow (not shown)."));
  box.append(list);
  return box;
}

function message(m) {
  const box = el("div", `compare-msg ${m.role}`);
  box.dataset.messageId = m.id;
  box.append(el("span", "role", m.role));
  for (const p of m.parts) {
    if (p.type === "text" && p.text) box.append(el("div", "text", p.text));
    if (p.type === "tool") {
      const input = JSON.stringify(p.state?.input ?? {});
      const row = el("div", "tool", `⚙ ${p.tool} ${input.length > 120 ? input.slice(0, 119) + "…" : input}`);
      // A call of a branch not shown in the chat can be taken onto the shown one: its own
      // file, or a shell call's whole step (docs/semantics.md §14.2).
      const apply = document.querySelector(`#messages [data-message-id="${m.id}"]`) ? null : applyButton(p);
      if (apply) row.append(apply);
      box.append(row);
    }
  }
  if (m.error) box.append(el("div", "error", m.error.message || "error"));
  return box;
}

function renderFiles(data) {
  const box = ensureDialog().querySelector(".compare-files");
  box.append(el("h3", "", data.files.length ? `Files that differ (${data.files.length}${data.files_truncated ? "+" : ""})` : "No file differs."));
  const ul = el("ul", "compare-file-list");
  for (const f of data.files) {
    const li = el("li", `change ${f.status}`);
    const b = el("button", "file-link");
    b.type = "button";
    b.dataset.path = f.path;
    b.append(el("code", "", f.path), el("span", "muted", ` ${f.status} `),
      el("span", "plus", f.binary ? "binary" : `+${f.additions}`), " ",
      el("span", "minus", f.binary ? "" : `−${f.deletions}`));
    b.addEventListener("click", () => showFile(f.path));
    li.append(b);
    ul.append(li);
  }
  box.append(ul);
}

async function showFile(path) {
  const d = ensureDialog();
  const box = d.querySelector(".compare-diff");
  for (const item of d.querySelectorAll(".compare-file-list .file-link")) {
    item.setAttribute("aria-current", item.dataset.path === path ? "true" : "false");
  }
  let data;
  try {
    data = await call("GET", api(`/compare/?${query(cmp.shown)}&file=${encodeURIComponent(path)}`));
  } catch (err) {
    box.replaceChildren(el("p", "error", err.message));
    return;
  }
  const head = el("div", "viewer-head");
  const toggle = el("button", "secondary small compare-mode", cmp.mode === "unified" ? "Side by side" : "Unified");
  toggle.type = "button";
  toggle.setAttribute("aria-label", cmp.mode === "unified" ? "Show the diff side by side" : "Show the diff unified");
  toggle.addEventListener("click", () => { cmp.mode = cmp.mode === "unified" ? "split" : "unified"; draw(); });
  head.append(el("code", "viewer-name", path), toggle);
  const body = el("div", "compare-diff-body");
  const draw = () => {
    toggle.textContent = cmp.mode === "unified" ? "Side by side" : "Unified";
    toggle.setAttribute("aria-label", cmp.mode === "unified" ? "Show the diff side by side" : "Show the diff unified");
    body.replaceChildren(cmp.mode === "unified" ? unified(data.patch) : split(data.patch));
  };
  draw();
  box.replaceChildren(head, body);
}

function unified(patch) {
  const pre = el("pre", "diff-view");
  pre.replaceChildren(...(patch || "(no textual change)").split("\n").map((line) => {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
    return el("span", "line " + cls, line + "\n");
  }));
  return pre;
}

export function splitRows(patch) {
  // The unified patch as rows of [left, right] ({n, text, cls} or null) and {hunk} lines:
  // a run of removed lines faces the run of added lines that follows it.
  const rows = [];
  let left = 0, right = 0, inHunk = false, dels = [], adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i] || null, adds[i] || null]);
    dels = [];
    adds = [];
  };
  for (const line of (patch || "").split("\n")) {
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (hunk) {
      flush();
      left = Number(hunk[1]);
      right = Number(hunk[2]);
      inHunk = true;
      rows.push({ hunk: line });
    } else if (!inHunk || line === "" || line.startsWith("\\")) {
      if (line.startsWith("Binary files") || line.startsWith("[diff truncated]")) rows.push({ hunk: line });
      if (line.startsWith("diff --git")) { flush(); inHunk = false; }
    } else if (line.startsWith("-")) {
      dels.push({ n: left++, text: line.slice(1), cls: "del" });
    } else if (line.startsWith("+")) {
      adds.push({ n: right++, text: line.slice(1), cls: "add" });
    } else {
      flush();
      rows.push([{ n: left++, text: line.slice(1), cls: "" }, { n: right++, text: line.slice(1), cls: "" }]);
    }
  }
  flush();
  return rows;
}

function split(patch) {
  const rows = splitRows(patch);
  if (!rows.length) return el("p", "muted", "(no textual change)");
  const table = el("table", "diff-split");
  table.setAttribute("aria-label", "The diff side by side: before (A) and after (B)");
  const cols = el("colgroup");
  for (const cls of ["ln", "code", "ln", "code"]) cols.append(el("col", cls));
  table.append(cols);
  for (const row of rows) {
    const tr = el("tr");
    if (!Array.isArray(row)) {
      const td = el("td", "hunk", row.hunk);
      td.colSpan = 4;
      tr.append(td);
    } else {
      for (const cell of row) {
        tr.append(el("td", "ln", cell ? String(cell.n) : ""), el("td", `code ${cell ? cell.cls : "empty"}`, cell ? cell.text : ""));
      }
    }
    table.append(tr);
  }
  return table;
}

// What a call's Apply takes (docs/semantics.md §14.2): a file tool's call, its own file; any
// other call that changes files (shell), its whole step; a call that changes none, nothing.
const FILE_TOOLS = Object.freeze(["write", "append", "delete"]);
const NO_CHANGE_TOOLS = Object.freeze(["read", "list", "wait"]);

function callPath(p) {
  const path = p.state?.input?.path;
  return typeof path === "string" ? path.trim().split("/").filter((s) => s && s !== ".").join("/") : "";
}

function applyButton(p) {
  if (NO_CHANGE_TOOLS.includes(p.tool)) return null;
  const path = FILE_TOOLS.includes(p.tool) ? callPath(p) : "";
  if (FILE_TOOLS.includes(p.tool) && !path) return null;
  const label = path ? `Apply ${path} to current branch` : "Apply this whole step to current branch";
  const b = el("button", "small secondary apply-step", label);
  b.type = "button";
  b.title = path
    ? `Take this call's change to ${path} onto the current branch's files (three-way); the step's other calls are left out`
    : `A ${p.tool} call's files are not told apart: this takes every file its step changed (three-way)`;
  b.setAttribute("aria-label", path ? `${label}: the change this ${p.tool} call made` : `${label}: every file the ${p.tool} call's step changed`);
  b.addEventListener("click", () => applyStep(p, b));
  return b;
}

async function applyStep(p, b, onConflict = "refuse") {
  b.disabled = true;
  const note = b.parentElement.querySelector(".apply-note") || el("span", "muted apply-note");
  b.parentElement.append(note);
  try {
    const done = await call("POST", api("/apply/"), { part_id: p.id, on_conflict: onConflict });
    note.textContent = done.conflicts.length
      ? ` applied with conflict markers in ${done.conflicts.join(", ")}`
      : ` applied${done.scope === "step" ? " the whole step" : ""}: ${done.applied.join(", ") || "no file changed"}`;
  } catch (err) {
    note.textContent = ` ${err.message}`;
    if (/conflict/i.test(err.message) && onConflict === "refuse") {
      const again = el("button", "small secondary", "Apply with conflict markers");
      again.type = "button";
      again.addEventListener("click", () => { again.remove(); applyStep(p, b, "markers"); });
      note.append(again);
    }
    b.disabled = false;
  }
}
