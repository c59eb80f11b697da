// How a part of a message looks: text (assistant text as Markdown, growing in place while it
// streams), reasoning, a tool card (with the approval the agent asks for), a compaction
// divider, a patch line. A part is drawn again only when its version, or what its look
// depends on, changed.
import { renderInto } from "../markdown.js";
import { roving } from "../roving.js";
import { call, showError } from "./api.js";
import { button, el } from "./dom.js";
import { currentStatus, getMessage, partState, subscribe } from "./store.js";
import { showWholePart } from "./sync.js";
import { revertButton } from "./moves.js";

// The drawn parts, a cache of this module's (the store's "forget" empties it with the parts).
const partNodes = new Map(); // part id -> {key, node}
subscribe("forget", (kind, id) => {
  if (kind === "all") partNodes.clear();
  else if (kind === "part") partNodes.delete(id);
});
const { openTools, denyReasons } = partState; // what the reader opened, typed (kept across renders)

export function partNode(p, m, dimmed) {
  const key = `${p.v}|${dimmed}|${p.type === "tool" ? currentStatus() : ""}`;
  const known = partNodes.get(p.id);
  if (known && known.key === key) return known.node;
  // A streaming text part keeps its element (its finished blocks are not rendered again).
  const reuse = known && p.type === "text" && !p.truncated ? known.node : null;
  const node = renderPartBody(p, m.role, reuse);
  if (node) {
    node.classList.toggle("reverted", dimmed);
    if (p.truncated) {
      // Lists cut very long fields; the whole part is one click away.
      const more = el("button", "link show-whole", "Cut here — show all");
      more.type = "button";
      more.addEventListener("click", () => showWholePart(p.id));
      node.append(more);
    }
    if (p.type === "tool" && m.role === "assistant") {
      node.append(roving(revertButton(m.id, p.id), "Revert to this tool call"));
    }
  }
  partNodes.set(p.id, { key, node });
  return node;
}

function renderPartBody(p, role, reuse) {
  if (p.type === "text") {
    if (role !== "assistant") return el("div", "text", p.text); // people's words stay plain
    // Assistant text is Markdown, rendered safely; a growing text grows in place.
    const box = reuse && reuse.classList.contains("text") ? reuse : el("div", "text");
    renderInto(box, p.text || "");
    return box;
  }
  if (p.type === "reasoning") return el("div", "reasoning", p.text);
  if (p.type === "tool") return renderToolCard(p);
  if (p.type === "compaction") {
    // A divider that opens to the summary the model sees in place of the older messages.
    const box = el("details", "compaction");
    box.open = openTools.has(p.id); // kept open across renders once opened
    const head = el("summary", "", `Conversation compacted: ${p.replaced ?? "earlier"} messages summarised for the model`);
    head.addEventListener("click", () => {
      if (box.open) openTools.delete(p.id); else openTools.add(p.id);
    });
    box.append(head);
    const text = el("div", "text");
    renderInto(text, p.text || "");
    box.append(text);
    return box;
  }
  if (p.type === "patch") {
    const files = p.files || [];
    const count = p.file_count ?? files.length; // the real number when the list was cut
    const more = count > 12 ? ` and ${(count - 12).toLocaleString()} more` : "";
    return el("div", "patch", "changed: " + files.slice(0, 12).join(", ") + more);
  }
  return null;
}

function toolLabel(p) {
  // What the card says of the call. A call left running or pending when the session is no
  // longer busy was stopped (Stop, a crash): it says so, not "running" beside an idle badge.
  const s = p.state || {};
  const meta = s.metadata || {};
  if (meta.lost_with_host) return { label: `lost with host ${meta.lost_with_host}`, cls: "stopped" };
  if (meta.interrupted) {
    // The recovery's reasons in words (docs/semantics.md §1.5): a call whose worker stopped
    // under it is never run again; one after it in its step is not run at all.
    const words = { resume: "its worker stopped; not run again", blocked: "not run: an earlier call was interrupted" };
    return { label: `interrupted (${words[meta.reason] || meta.reason || "?"})`, cls: "stopped" };
  }
  const live = currentStatus() === "busy" || currentStatus() === "waiting";
  if (!live && (s.status === "running" || (s.status === "pending" && s.approval?.status !== "requested"))) {
    return { label: "stopped", cls: "stopped" };
  }
  return { label: s.status || "", cls: s.status || "" };
}

function renderToolCard(p) {
  // A collapsible card: name, status and target in the summary; input and output inside.
  const box = el("details", "tool");
  box.dataset.partId = p.id;
  const s = p.state || {};
  if (openTools.has(p.id) || s.status === "running" || s.status === "error") box.open = true;
  const head = el("summary");
  // The user's choice (a click or Enter on the summary, before the card toggles) is kept;
  // a card opened because it runs closes again when it is done.
  head.addEventListener("click", () => {
    if (box.open) openTools.delete(p.id); else openTools.add(p.id);
  });
  const { label, cls } = toolLabel(p);
  head.append(el("span", "name", p.tool), el("span", "state " + cls, label));
  const input = s.input || {};
  head.append(el("span", "muted", input.path ?? input.command ?? (input.seconds !== undefined ? `${input.seconds}s` : "")));
  box.append(head);
  box.append(el("pre", "input", JSON.stringify(input, null, 1)));
  const approval = s.approval || {};
  if (s.status === "pending" && approval.status === "requested") {
    box.open = true;
    box.classList.add("asking");
    box.append(approvalCard(p, approval));
  } else if (approval.status && approval.by !== "rule") {
    box.append(el("p", "muted decision", approval.status === "denied"
      ? `Denied by you${approval.reason ? ": " + approval.reason : ""}` : "Allowed by you"));
  }
  // The output as it comes (a running shell), and what an interrupted call had printed.
  if (s.output) box.append(el("pre", "output" + (s.status === "running" ? " live" : ""), s.output));
  if (s.status === "error") box.append(el("pre", "error", s.error || "error"));
  return box;
}

function approvalCard(p, approval) {
  // What will happen (the command, or the diff of the write) and the owner's three answers.
  const card = el("div", "approval");
  card.setAttribute("role", "group");
  card.setAttribute("aria-label", `Approve ${p.tool}`);
  card.append(el("strong", "", `The agent asks to run ${p.tool}`));
  if (approval.preview) card.append(el("pre", "preview", approval.preview));
  const runId = getMessage(p.message_id)?.run_id;
  const reason = el("input", "reason");
  reason.placeholder = "Reason (told to the agent when you deny)";
  reason.setAttribute("aria-label", "Reason for denying");
  reason.value = denyReasons.get(p.id) || "";
  reason.addEventListener("input", () => denyReasons.set(p.id, reason.value));
  const decide = async (decision) => {
    showError("");
    try {
      await call("POST", `/api/runs/${runId}/approve/`, {
        part_id: p.id, decision, reason: decision === "deny" ? reason.value : "",
      });
      denyReasons.delete(p.id);
    } catch (err) { showError(err.message); }
  };
  const row = el("div", "row");
  row.append(
    button("Allow", "Allow this call", () => decide("allow"), "allow"),
    button("Always", "Allow, and allow this exact call from now on in this session", () => decide("always"), "secondary always"),
    reason,
    button("Deny", "Deny this call; the agent reads your reason", () => decide("deny"), "secondary deny"),
  );
  card.append(row);
  return card;
}
