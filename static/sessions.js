// The sessions list: forms that ask before they submit (data-confirm), bound here because the
// Content-Security-Policy runs no inline handler.
for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
}
