import { askUpload, nameOf, topFolderOfArchive, topFolderOfPaths } from "./upload_ask.js";

// The sessions list: forms that ask before they submit (data-confirm), bound here because the
// Content-Security-Policy runs no inline handler.
for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
}

// Import a session from a JSON export (GET /api/sessions/{id}/export/): the file's text goes
// to POST /api/sessions/import/; on success the new session's chat opens, otherwise the
// error's sentence shows under the form.
const importForm = document.getElementById("import-form");
if (importForm) {
  const input = document.getElementById("import-file");
  const button = document.getElementById("import-session");
  const error = document.getElementById("import-error");
  const show = (message) => {
    error.textContent = message;
    error.hidden = !message;
  };
  input.addEventListener("change", () => show(""));
  importForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    show("");
    const file = input.files && input.files[0];
    if (!file) {
      show("Choose a JSON export to import.");
      return;
    }
    button.disabled = true;
    button.textContent = "Importing…";
    try {
      const response = await fetch(importForm.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: {
          "Content-Type": "application/json",
          "X-CSRFToken": importForm.querySelector("[name=csrfmiddlewaretoken]").value,
        },
        body: await file.text(),
      });
      let answer = null;
      try {
        answer = await response.json();
      } catch {
        answer = null; // not JSON: a proxy's page, say
      }
      if (response.status === 201 && answer && answer.id) {
        window.location.assign(importForm.dataset.chatUrl.replace("SESSION_ID", encodeURIComponent(answer.id)));
        return;
      }
      show((answer && answer.error && answer.error.message) || `The import failed (HTTP ${response.status}).`);
    } catch (exc) {
      show(`The import failed: ${exc.message}`);
    } finally {
      button.disabled = false;
      button.textContent = "Import";
    }
  });
}

// New session from a repository (POST /api/sessions/ with `repository`: the chat opens and
// shows the clone's progress) or from an upload (POST /api/sessions/upload/: an archive, or
// a folder's files with their relative paths), with the upload's progress.
const newFrom = document.getElementById("new-from");
if (newFrom) {
  const error = document.getElementById("new-from-error");
  const show = (message) => { error.textContent = message; error.hidden = !message; };
  const token = () => newFrom.querySelector("[name=csrfmiddlewaretoken]").value;
  const chatUrl = (id) => document.getElementById("clone-form").dataset.chatUrl.replace("SESSION_ID", encodeURIComponent(id));
  const answerOf = (text) => { try { return JSON.parse(text); } catch { return null; } };

  const loadCredentials = async () => {
    if (!newFrom.open) return;
    const select = document.getElementById("clone-credential");
    const response = await fetch("/api/credentials/", { credentials: "same-origin" });
    if (!response.ok) return;
    select.replaceChildren(new Option("no credential (public)", ""));
    for (const row of await response.json()) select.append(new Option(`${row.name} (${row.host}:${row.port}, ${row.kind})`, row.id));
  };
  newFrom.addEventListener("toggle", loadCredentials);
  loadCredentials(); // opened by ?new=1

  document.getElementById("clone-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    show("");
    const button = document.getElementById("clone-submit");
    button.disabled = true;
    try {
      const depth = document.getElementById("clone-depth").value;
      const response = await fetch("/api/sessions/", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": token() },
        body: JSON.stringify({
          repository: {
            url: document.getElementById("clone-url").value.trim(),
            ref: document.getElementById("clone-ref").value.trim(),
            depth: depth === "" ? 1 : Number(depth),
            credential_id: document.getElementById("clone-credential").value || null,
          },
        }),
      });
      const answer = answerOf(await response.text());
      if (response.status === 201 && answer?.id) { window.location.assign(chatUrl(answer.id)); return; }
      show(answer?.error?.message || `The clone could not start (HTTP ${response.status}).`);
    } catch (exc) {
      show(`The clone could not start: ${exc.message}`);
    } finally {
      button.disabled = false;
    }
  });

  const progress = document.getElementById("upload-progress");
  const upload = (form) => new Promise((resolve) => {
    // XMLHttpRequest: fetch() reports no upload progress.
    const request = new XMLHttpRequest();
    request.open("POST", "/api/sessions/upload/");
    request.setRequestHeader("X-CSRFToken", token());
    request.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) { progress.max = e.total; progress.value = e.loaded; }
    });
    request.addEventListener("load", () => resolve({ status: request.status, answer: answerOf(request.responseText) }));
    request.addEventListener("error", () => resolve({ status: 0, answer: null }));
    progress.hidden = false;
    request.send(form);
  });
  const send = async (form) => {
    show("");
    const { status, answer } = await upload(form);
    progress.hidden = true;
    if (status === 201 && answer?.id) { window.location.assign(chatUrl(answer.id)); return; }
    show(answer?.error?.message || (status ? `The upload was refused (HTTP ${status}).` : "The upload failed: the server could not be reached."));
  };
  // Nothing is created before the dialog (upload_ask.js) says the name and whether to drop
  // the single top folder; Cancel sends nothing.
  const asked = async (form, question) => {
    const answer = await askUpload(question);
    if (!answer) return;
    form.append("title", answer.title);
    if (answer.strip) form.append("strip_top_folder", "true");
    send(form);
  };
  const sendArchive = async (file) => {
    const form = new FormData();
    form.append("file", file, file.name);
    const top = await topFolderOfArchive(file);
    await asked(form, { what: `From the archive ${file.name}`, name: nameOf(file.name), top });
  };
  const sendFolder = async (entries) => {
    const form = new FormData();
    for (const [path, file] of entries) { form.append("files", file, file.name); form.append("paths", path); }
    const paths = entries.map(([path]) => path);
    const first = paths[0].split("/")[0];
    const top = topFolderOfPaths(paths);
    const what = `${entries.length.toLocaleString()} file${entries.length === 1 ? "" : "s"} from ${top ? `the folder ${top}` : "a folder"}`;
    await asked(form, { what, name: top || first || "Upload", top });
  };
  const chosen = (input, go) => input.addEventListener("change", async () => {
    await go([...input.files]);
    input.value = ""; // the same file chosen again after a Cancel asks again
  });
  chosen(document.getElementById("upload-file"), (files) => files[0] && sendArchive(files[0]));
  chosen(document.getElementById("upload-folder"), (files) => files.length && sendFolder(files.map((f) => [f.webkitRelativePath || f.name, f])));

  // A drop: one archive file, or a folder (walked with the entries API).
  const zone = document.getElementById("drop-zone");
  const walk = async (entry, prefix, out) => {
    if (entry.isFile) {
      out.push([prefix + entry.name, await new Promise((ok, ko) => entry.file(ok, ko))]);
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((ok, ko) => reader.readEntries(ok, ko));
        if (!batch.length) break;
        for (const child of batch) await walk(child, `${prefix}${entry.name}/`, out);
      }
    }
  };
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", async (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    const items = [...e.dataTransfer.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    if (items.length === 1 && items[0].isFile) { sendArchive(e.dataTransfer.files[0]); return; }
    const out = [];
    for (const entry of items) await walk(entry, "", out);
    if (out.length) sendFolder(out); else show("Nothing to upload in what was dropped.");
  });
}
