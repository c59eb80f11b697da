// The chat's side panels: the worktree's files (with a viewer), the changes of the
// conversation (with their diff), the lineage picture, and the share box of the session menu.
// They address the session the chat shows through chat/api.js (the sidebar switches it).
import { addBlame } from "./blame.js";
import { api, call, showError } from "./chat/api.js";
import { el, when } from "./chat/dom.js";
import { shareState } from "./chat/store.js";

function viewer(id) {
  // A viewer box: the name of what it shows, a Close button, and the content.
  const box = document.getElementById(id);
  const name = box.querySelector(".viewer-name");
  const body = box.querySelector("pre");
  return { box, name, body };
}

function openViewer(id, title, fill) {
  const v = viewer(id);
  v.name.textContent = title;
  fill(v.body);
  v.box.hidden = false;
  v.box.scrollIntoView({ block: "nearest" }); // in the panel's view, not below its lists
}

export function closeViewers() {
  for (const id of ["file-view", "diff-view"]) document.getElementById(id).hidden = true;
}

function clickable(li, action, ...content) {
  // A list entry that opens something: a real button inside the item (keys for free).
  const b = el("button", "file-link");
  b.type = "button";
  b.append(...content);
  b.addEventListener("click", action);
  li.append(b);
  return li;
}

export async function loadFiles() {
  const list = await call("GET", api("/files/")).catch(() => []);
  const ul = document.getElementById("files");
  ul.replaceChildren(...list.map((f) => {
    const li = el("li");
    li.dataset.path = f.path;
    return clickable(li, () => showFile(f.path), f.path);
  }));
  if (!list.length) ul.replaceChildren(el("li", "muted empty", "No files yet."));
  // Files the snapshots do not keep (large, ignored, excluded): listed, never silently gone.
  const left = await call("GET", api("/files/?not_kept=1")).catch(() => null);
  if (left && left.count) {
    const li = el("li", "muted not-kept", `Not kept by snapshots (${left.count}): ` +
      left.files.map((f) => `${f.path} (${f.reason})`).join(", ") + (left.count > left.files.length ? " …" : ""));
    li.title = "A revert, a fork and the downloads leave these out.";
    ul.append(li);
  }
  const shown = viewer("file-view");
  if (!shown.box.hidden && !list.some((f) => f.path === shown.name.textContent)) shown.box.hidden = true;
}

async function showFile(path) {
  const url = api(`/files/${path.split("/").map(encodeURIComponent).join("/")}`);
  const res = await fetch(url, { credentials: "same-origin" });
  const text = res.ok ? await res.text() : "This file cannot be shown.";
  let shown;
  openViewer("file-view", path, (pre) => {
    pre.classList.remove("blamed");
    pre.dataset.path = path;
    pre.textContent = text;
    shown = pre;
  });
  const download = document.getElementById("file-download");
  if (download) download.href = `${url}?download=1`;
  if (res.ok) addBlame(shown, path, text); // the gutter: which step wrote each line
}

export async function loadChanges() {
  const list = await call("GET", api("/diff/")).catch(() => []);
  const ul = document.getElementById("changes");
  ul.replaceChildren(...list.map((d) => {
    const li = el("li", "change " + d.status);
    return clickable(li, () => showDiff(d.file),
      el("code", "", d.file), el("span", "muted", ` ${d.status} +${d.additions} −${d.deletions}`));
  }));
  if (!list.length) ul.replaceChildren(el("li", "muted empty", "No changes yet."));
  // An open diff follows the changes: it closes when its file has no change any more (a
  // revert, an edit or a branch switch took it away), and shows the file's diff as it is now.
  const shown = viewer("diff-view");
  if (shown.box.hidden) return;
  const file = shown.name.textContent;
  if (list.some((d) => d.file === file)) showDiff(file);
  else shown.box.hidden = true;
}

async function showDiff(file) {
  const data = await call("GET", api(`/diff/?file=${encodeURIComponent(file)}`)).catch((err) => ({ patch: err.message }));
  openViewer("diff-view", file, (pre) => {
    pre.replaceChildren(...(data.patch || "(no textual change)").split("\n").map((line) => {
      const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
        : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
      return el("span", "line " + cls, line + "\n");
    }));
  });
}

function spent(u) {
  // One usage sum, compactly: cost, calls, tokens in/out.
  const cost = u.cost_usd ? `$${u.cost_usd.toFixed(u.cost_usd < 0.01 ? 5 : 2)} · ` : "";
  return `${cost}${u.calls} call${u.calls === 1 ? "" : "s"} · ${u.input_tokens} in / ${u.output_tokens} out`;
}

function usageBlock(usage) {
  // GET …/usage/ (docs/semantics.md §14.6): this session's own cost, what its history cost where it
  // was forked from (counted there, not here), and each branch's own.
  if (!usage) return null;
  const box = el("div", "lineage-usage");
  box.id = "lineage-usage";
  const dl = el("dl");
  dl.append(el("dt", "", "Own"), el("dd", "usage-own", spent(usage.own)));
  if (usage.inherited.calls) {
    dl.append(el("dt", "", "Inherited"), el("dd", "usage-inherited", spent(usage.inherited)));
  }
  box.append(dl);
  if (usage.branches.length > 1) {
    const list = el("ol", "usage-branches");
    list.setAttribute("aria-label", "Own cost per branch, newest first");
    for (const b of usage.branches) {
      const li = el("li", "", spent(b.own));
      li.title = `Branch ending at ${b.head_message_id}`;
      li.dataset.head = b.head_message_id;
      list.append(li);
    }
    box.append(el("div", "muted", `Per branch (own, newest first${usage.truncated ? ", the newest only" : ""}):`), list);
  }
  return box;
}

export async function loadLineage() {
  const [data, usage] = await Promise.all([
    call("GET", api("/lineage/")).catch(() => null),
    call("GET", api("/usage/")).catch(() => null),
  ]);
  const box = document.getElementById("lineage");
  if (!data) return;
  const cost = usageBlock(usage);
  const chain = [...data.ancestors, data.session];
  const forks = data.forks;
  const origin = originLine(data.origin);
  if (chain.length === 1 && !forks.length) {
    box.replaceChildren(...[cost, origin || el("p", "muted", "Not forked yet. “Fork from here” on a message, or Fork session in the menu.")].filter(Boolean));
    return;
  }
  // Top to bottom, at the panel's own scale (never squeezed or cut): the chain of parents,
  // this session, then its forks, indented under it.
  const W = 200, H = 30, GAP = 14, INDENT = 22;
  const width = INDENT + W + 2;
  const rows = chain.length + forks.length;
  const height = rows * (H + GAP) - GAP + 2;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `Lineage: ${chain.map((s) => s.title).join(" → ")}${forks.length ? `; ${forks.length} fork(s)` : ""}`);
  const node = (s, x, y, current) => {
    const a = document.createElementNS(ns, "a");
    a.setAttribute("href", `/sessions/${s.id}/`);
    const r = document.createElementNS(ns, "rect");
    Object.entries({ x: x + 1, y: y + 1, width: W, height: H, rx: 6, class: current ? "node current" : "node" }).forEach(([k, v]) => r.setAttribute(k, v));
    const t = document.createElementNS(ns, "text");
    Object.entries({ x: x + 10, y: y + H / 2 + 5 }).forEach(([k, v]) => t.setAttribute(k, v));
    const title = s.title || s.id;
    t.textContent = title.length > 26 ? title.slice(0, 25) + "…" : title;
    const tip = document.createElementNS(ns, "title");
    tip.textContent = title;
    a.append(r, t, tip);
    svg.append(a);
  };
  const edge = (d) => {
    const l = document.createElementNS(ns, "path");
    l.setAttribute("d", d);
    l.setAttribute("class", "edge");
    svg.append(l);
  };
  chain.forEach((s, i) => {
    const y = i * (H + GAP);
    if (i) edge(`M${W / 2} ${y - GAP + 1} V${y + 1}`);
    node(s, 0, y, i === chain.length - 1);
  });
  const top = (chain.length - 1) * (H + GAP);
  forks.forEach((s, i) => {
    const y = top + (i + 1) * (H + GAP);
    edge(`M12 ${top + H + 1} V${y + H / 2 + 1} H${INDENT + 1}`);
    node(s, INDENT, y, false);
  });
  box.replaceChildren(...[cost, origin, svg, compareList([...data.ancestors, ...forks])].filter(Boolean));
}

function originLine(origin) {
  // A fork whose source is not the reader's to open (a share, the admin's fork, a deleted
  // session) says where it came from, as it was when forked.
  if (!origin) return null;
  const title = origin.title ? `“${origin.title}”` : "a session";
  const owner = origin.owner ? ` (${origin.owner}’s)` : "";
  const text = origin.kind === "share" ? `Forked from a shared session: ${title}${owner}.`
    : origin.kind === "admin" ? `An admin fork of ${title}${owner}.`
    : `Forked from ${title}${owner}, which you cannot open.`;
  const p = el("p", "lineage-origin", text);
  p.id = "lineage-origin";
  return p;
}

function compareList(others) {
  // "Compare" for each session of the lineage the caller owns: with this one, from the fork
  // point (compare.js opens it; an event, so this module does not import that one).
  if (!others.length) return null;
  const list = el("ul", "lineage-compare");
  list.setAttribute("aria-label", "Compare this session with");
  for (const s of others) {
    const b = el("button", "small secondary", "Compare");
    b.type = "button";
    b.setAttribute("aria-label", `Compare this session with “${s.title || s.id}”`);
    b.dataset.sessionId = s.id;
    b.addEventListener("click", () => document.dispatchEvent(new CustomEvent("compare-session", { detail: s })));
    const li = el("li", "", "");
    li.append(b, " ", el("span", "", s.title || s.id));
    list.append(li);
  }
  return list;
}

// -- the share box ------------------------------------------------------------------------
function showShare(link) {
  const box = document.getElementById("share-box");
  const button = document.getElementById("share");
  if (!link) {
    box.hidden = true;
    document.getElementById("share-url").value = "";
    button.textContent = "Share a read-only link";
    return;
  }
  document.getElementById("share-url").value = new URL(link.url, location.origin).href;
  document.getElementById("share-pinned").textContent =
    `Pinned ${when(link.pinned_at)}: the messages and files as they were then.`;
  button.textContent = "Update the link to now";
  box.hidden = false;
}

// Each request about the link takes a number; an answer is shown only if no later request
// was made meanwhile: a slow GET from the page's load must not bring back a link that a
// click revoked after it.

async function shareRequest(method, body) {
  const mine = ++shareState.seq;
  const link = await call(method, api("/share/"), body);
  return { link, current: mine === shareState.seq };
}

export async function loadShare() {
  const mine = ++shareState.seq;
  const link = await call("GET", api("/share/")).catch(() => null);
  if (mine === shareState.seq) showShare(link);
}

export function initShare() {
  document.getElementById("share").addEventListener("click", async () => {
    showError("");
    try {
      const include = document.getElementById("share-system-prompt").checked;
      const { link, current } = await shareRequest("POST", { include_system_prompt: include });
      if (!current) return;
      showShare(link);
      document.getElementById("share-url").select();
    } catch (err) { showError(err.message); }
  });
  document.getElementById("revoke-share").addEventListener("click", async () => {
    showError("");
    try {
      const { current } = await shareRequest("DELETE");
      if (current) showShare(null);
    } catch (err) { showError(err.message); }
  });
  document.getElementById("copy-share").addEventListener("click", async () => {
    const input = document.getElementById("share-url");
    const done = document.getElementById("copy-share");
    try {
      await navigator.clipboard.writeText(input.value);
    } catch {
      input.select();
      document.execCommand("copy");
    }
    done.textContent = "Copied";
    setTimeout(() => { done.textContent = "Copy"; }, 1500);
  });
  for (const id of ["file-view", "diff-view"]) {
    viewer(id).box.querySelector(".viewer-close").addEventListener("click", () => {
      document.getElementById(id).hidden = true;
    });
  }
}
