// Before an upload creates its session (issue 46, point 14): a small dialog asks for the
// session's name (the archive's or the folder's name to start with) and, when everything in
// the upload sits in one top-level folder ("proj/…"), whether to drop that folder so its
// contents are the worktree (POST /api/sessions/upload/ with strip_top_folder, docs/api.md
// "Repositories, uploads, pushes and credentials"). The archive's listing is read here, in the
// browser, without unpacking it: a zip's central directory, a tar's headers (a .tar.gz through
// DecompressionStream). A listing that cannot be read (too big to read in time, a zip64, an
// unknown format) offers no checkbox: the server's own checks stay the ones that count.

const READ_MS = 4000; // a listing that takes longer than this is not offered
const TAR_BLOCK = 512;

function topName(path) {
  // "./proj/a.txt" -> ["proj", true]: its first segment, and whether anything follows it.
  const parts = path.split("/").filter((p) => p && p !== ".");
  if (!parts.length) return null;
  return [parts[0], parts.length > 1 || path.endsWith("/")];
}

function single(paths) {
  // The one folder at the top, or null (files at the top, or several entries).
  const tops = new Map(); // name -> is a folder
  for (const path of paths) {
    const top = topName(path);
    if (!top) continue;
    tops.set(top[0], (tops.get(top[0]) || false) || top[1]);
    if (tops.size > 1) return null;
  }
  const [entry] = tops.entries();
  return entry && entry[1] && entry[0] !== ".." ? entry[0] : null;
}

async function zipNames(file) {
  const tailSize = Math.min(file.size, 65557);
  const tail = new DataView(await file.slice(file.size - tailSize).arrayBuffer());
  let end = -1;
  for (let i = tailSize - 22; i >= 0; i--) {
    if (tail.getUint32(i, true) === 0x06054b50) { end = i; break; }
  }
  if (end < 0) return null;
  const size = tail.getUint32(end + 12, true);
  const offset = tail.getUint32(end + 16, true);
  if (size === 0xffffffff || offset === 0xffffffff) return null; // zip64: not read here
  const dir = new DataView(await file.slice(offset, offset + size).arrayBuffer());
  const decoder = new TextDecoder();
  const names = [];
  for (let at = 0; at + 46 <= dir.byteLength && dir.getUint32(at, true) === 0x02014b50;) {
    const nameLength = dir.getUint16(at + 28, true);
    const skip = dir.getUint16(at + 30, true) + dir.getUint16(at + 32, true);
    names.push(decoder.decode(new Uint8Array(dir.buffer, at + 46, nameLength)));
    at += 46 + nameLength + skip;
  }
  return names;
}

function field(block, start, length) {
  const bytes = block.subarray(start, start + length);
  const zero = bytes.indexOf(0);
  return new TextDecoder().decode(zero < 0 ? bytes : bytes.subarray(0, zero));
}

async function tarNames(stream) {
  // Streamed: headers read, file bodies skipped, so a large archive is not held in memory.
  const reader = stream.getReader();
  const started = Date.now();
  let buffer = new Uint8Array(0);
  const more = async () => {
    const { value, done } = await reader.read();
    if (done) return false;
    const joined = new Uint8Array(buffer.length + value.length);
    joined.set(buffer);
    joined.set(value, buffer.length);
    buffer = joined;
    return true;
  };
  const take = async (n) => {
    while (buffer.length < n) if (!(await more())) return null;
    const out = buffer.slice(0, n);
    buffer = buffer.subarray(n);
    return out;
  };
  const names = [];
  let longName = null;
  try {
    for (;;) {
      if (Date.now() - started > READ_MS) return null;
      const block = await take(TAR_BLOCK);
      if (!block || block.every((b) => b === 0)) return names;
      const size = parseInt(field(block, 124, 12).trim() || "0", 8);
      const type = String.fromCharCode(block[156]);
      const padded = Math.ceil(size / TAR_BLOCK) * TAR_BLOCK;
      if (type === "L" || type === "x") {
        const data = await take(padded);
        if (!data) return null;
        const text = field(data, 0, size);
        longName = type === "L" ? text : (/(?:^|\n)\d+ path=([^\n]*)\n/.exec(text)?.[1] ?? longName);
        continue;
      }
      if (type !== "g") {
        const prefix = field(block, 345, 155);
        names.push(longName ?? (prefix ? `${prefix}/${field(block, 0, 100)}` : field(block, 0, 100)));
      }
      longName = null;
      if (!(await take(padded)) && padded) return null;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

export async function topFolderOfArchive(file) {
  // The archive's single top-level folder, or null.
  const name = file.name.toLowerCase();
  try {
    let names = null;
    if (name.endsWith(".zip")) names = await zipNames(file);
    else if (name.endsWith(".tar")) names = await tarNames(file.stream());
    else if ((name.endsWith(".tar.gz") || name.endsWith(".tgz")) && "DecompressionStream" in window) {
      names = await tarNames(file.stream().pipeThrough(new DecompressionStream("gzip")));
    }
    return names ? single(names) : null;
  } catch {
    return null;
  }
}

export function topFolderOfPaths(paths) {
  return single(paths);
}

export function nameOf(fileName) {
  return fileName.replace(/\.(zip|tar|tgz|tar\.gz)$/i, "") || fileName;
}

function part(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text) node.textContent = text;
  return node;
}

export function askUpload({ what, name, top }) {
  // Resolves to {title, strip} when the user creates the session, null when they cancel.
  return new Promise((resolve) => {
    const dialog = part("dialog", { id: "upload-dialog", class: "upload-dialog", "aria-labelledby": "upload-dialog-title" });
    const form = part("form", { method: "dialog" });
    const heading = part("h2", { id: "upload-dialog-title" }, "New session from an upload");
    const from = part("p", { class: "muted upload-what" }, what);
    const label = part("label", { for: "upload-name" }, "Session name");
    const input = part("input", { id: "upload-name", maxlength: "200", required: "", autocomplete: "off" });
    input.value = name.slice(0, 200);
    form.append(heading, from, label, input);
    const strip = part("input", { type: "checkbox", id: "upload-strip" });
    if (top) {
      strip.checked = true;
      const row = part("label", { class: "upload-strip", for: "upload-strip" });
      const words = part("span", {}, "Drop the top folder ");
      words.append(part("code", {}, `${top}/`));
      row.append(strip, words);
      const hint = part("p", { class: "muted upload-hint" }, `Its files go at the top of the session: ${top}/a.txt becomes a.txt.`);
      form.append(row, hint);
    }
    const buttons = part("div", { class: "row upload-buttons" });
    const create = part("button", { type: "submit", id: "upload-create", value: "create" }, "Create session");
    const cancel = part("button", { type: "button", id: "upload-cancel", class: "secondary" }, "Cancel");
    buttons.append(create, cancel);
    form.append(buttons);
    dialog.append(form);
    document.body.append(dialog);
    let answer = null;
    cancel.addEventListener("click", () => dialog.close());
    form.addEventListener("submit", () => {
      answer = { title: input.value.trim() || name, strip: Boolean(top) && strip.checked };
    });
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(answer);
    });
    dialog.showModal();
    input.select();
  });
}
