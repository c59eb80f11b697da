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
