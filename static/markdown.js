// Assistant Markdown, rendered safely: markdown-it (no raw HTML; links only to http, https and
// mailto), fenced code highlighted by highlight.js, then DOMPurify (an allowlist of tags and
// attributes) before anything reaches the DOM. Model-written HTML is never parsed as HTML:
// markdown-it escapes it to text, and DOMPurify would drop whatever got through.
//
//   import { renderMarkdown, renderInto } from "/static/markdown.js";
//   el.replaceChildren(renderMarkdown(text));   // a DocumentFragment
//   renderInto(el, text);                       // the same, and adds the "md" class; while an
//                                               // answer streams, call it on every delta
//
// Streaming: renderInto keeps the blocks that are complete and renders only the last one
// again, so each delta costs about the size of the last block; an unfinished fence renders as
// a code block up to the end of the text. Highlighted code is cached besides.
// The page links static/vendor/highlight.js/a11y-light.min.css and static/markdown.css.
import MarkdownIt from "./vendor/markdown-it/markdown-it.esm.min.mjs";
import DOMPurify from "./vendor/dompurify/purify.es.mjs";
import hljs from "./vendor/highlight.js/highlight.min.js";

const SAFE_URL = /^(?:https?:\/\/|mailto:)/i;
const COPIED_FOR_MS = 1500;

const md = new MarkdownIt({
  html: false, // raw HTML in the text stays text
  linkify: true,
  typographer: false,
  breaks: true, // a chat answer's single newline is a line break, as people mean it
  highlight,
});

// A link that is not http, https or mailto is not a link: markdown-it leaves its Markdown as
// text ("[x](javascript:alert(1))" is shown as written). Images count as links here too.
md.validateLink = (url) => SAFE_URL.test(url.trim());

// Images are not loaded (the policy allows none from elsewhere, and a model should not make the
// browser fetch URLs): an image becomes a link to it, named by its alt text.
md.renderer.rules.image = (tokens, idx) => {
  const token = tokens[idx];
  const src = token.attrGet("src") || "";
  const label = md.utils.escapeHtml(token.content || src);
  return `<a href="${md.utils.escapeHtml(src)}">${label}</a>`;
};

// Table alignment as a class, not a style attribute: the Content-Security-Policy refuses inline
// styles (and DOMPurify drops them).
md.core.ruler.push("align_as_class", (state) => {
  for (const token of state.tokens) {
    if (token.type !== "th_open" && token.type !== "td_open") continue;
    const style = token.attrGet("style");
    if (!style) continue;
    token.attrs = token.attrs.filter(([name]) => name !== "style");
    const align = /text-align:\s*(left|right|center)/.exec(style);
    if (align) token.attrJoin("class", `md-align-${align[1]}`);
  }
});

// Highlighting is the slow part; while an answer streams, every block above the growing one
// comes again unchanged. A small cache keyed by language and code.
const highlighted = new Map();
const CACHE_SIZE = 200;

function highlight(content, lang) {
  const code = content.endsWith("\n") ? content.slice(0, -1) : content; // the fence's last line break
  const language = lang && hljs.getLanguage(lang) ? lang.toLowerCase() : "";
  const key = `${language}\u0000${code}`;
  let html = highlighted.get(key);
  if (html === undefined) {
    html = language
      ? hljs.highlight(code, { language, ignoreIllegals: true }).value
      : md.utils.escapeHtml(code); // no auto-detection: slow, and often wrong on short code
    if (highlighted.size >= CACHE_SIZE) highlighted.delete(highlighted.keys().next().value);
    highlighted.set(key, html);
  }
  const cls = language ? `hljs language-${md.utils.escapeHtml(language)}` : "hljs";
  return `<pre><code class="${cls}">${html}</code></pre>`;
}

const PURIFY = {
  ALLOWED_TAGS: [
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote",
    "pre", "code", "span", "em", "strong", "s", "a", "table", "thead", "tbody", "tr", "th", "td",
  ],
  ALLOWED_ATTR: ["href", "title", "class", "start"],
  ALLOWED_URI_REGEXP: SAFE_URL,
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

/** The Markdown `text` as a sanitised DocumentFragment, code blocks with a Copy button. */
export function renderMarkdown(text) {
  return fragmentOf(md.render(normalized(text), {}));
}

/**
 * Renders the Markdown `text` into `el` (the "md" class added, its children replaced). Call it
 * again with the longer text on every delta of a streaming answer: when the new text extends
 * the one `el` shows, the blocks that are already complete (every top-level block but the
 * last) stay as they are and only the rest is rendered again, so a delta costs the same at the
 * end of a long answer as at its start. Anything else (a text that is not an extension, the
 * element changed by someone else, reference-style link definitions, which may reach back to
 * an earlier block) renders the whole text.
 */
export function renderInto(el, text) {
  const value = normalized(text);
  let state = streams.get(el);
  if (state && state.text === value) return;
  const kept = state && state.frozenNodes ? el.childNodes[state.frozenNodes - 1] : undefined;
  if (
    !state ||
    !value.startsWith(state.text) ||
    REFERENCE.test(value) ||
    (state.frozenNodes > 0 && kept !== state.lastFrozen)
  ) {
    state = { text: "", frozenChars: 0, frozenNodes: 0, lastFrozen: undefined };
    streams.set(el, state);
    el.replaceChildren();
  }
  el.classList.add("md");
  while (el.childNodes.length > state.frozenNodes) el.lastChild.remove();

  const tail = value.slice(state.frozenChars);
  const env = {};
  const tokens = md.parse(tail, env);
  // The top-level blocks: the last one may still grow; those before it are complete.
  let last = -1;
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i].level === 0 && tokens[i].nesting !== -1 && tokens[i].map) last = i;
  }
  if (last > 0) {
    const done = fragmentOf(md.renderer.render(tokens.slice(0, last), md.options, env));
    state.frozenNodes += done.childNodes.length;
    state.lastFrozen = done.lastChild || state.lastFrozen;
    el.append(done);
    state.frozenChars += offsetOfLine(tail, tokens[last].map[0]);
  }
  el.append(fragmentOf(md.renderer.render(last > 0 ? tokens.slice(last) : tokens, md.options, env)));
  state.text = value;
}

const streams = new WeakMap();
// A link reference definition ("[id]: url"), which links of blocks before it may use.
const REFERENCE = /^ {0,3}\[[^\]]+\]:/m;

// As markdown-it normalises its input, so that line offsets agree with its line numbers.
function normalized(text) {
  return String(text ?? "").replace(/\r\n?/g, "\n").replace(/\0/g, "\uFFFD");
}

function offsetOfLine(text, line) {
  let offset = 0;
  for (let i = 0; i < line; i++) offset = text.indexOf("\n", offset) + 1;
  return offset;
}

// Sanitised, then links made to open in a new tab and code blocks given a Copy button.
function fragmentOf(html) {
  const fragment = DOMPurify.sanitize(html, PURIFY);
  // The newlines between blocks are not content: the text reads as the answer does.
  for (const node of [...fragment.childNodes]) {
    if (node.nodeType === Node.TEXT_NODE && !node.data.trim()) node.remove();
  }
  for (const a of fragment.querySelectorAll("a")) {
    if (!SAFE_URL.test(a.getAttribute("href") || "")) {
      a.replaceWith(...a.childNodes); // not a link we allow: its text stays
      continue;
    }
    a.target = "_blank";
    a.rel = "noopener noreferrer";
  }
  // A code block or table wider (or a code block taller) than the bubble scrolls: focusable,
  // so that the keyboard can scroll it too.
  for (const pre of fragment.querySelectorAll("pre")) {
    const box = document.createElement("div");
    box.className = "md-code";
    pre.tabIndex = 0;
    pre.replaceWith(box);
    box.append(copyButton(pre), pre); // above the code, never over it
  }
  for (const table of fragment.querySelectorAll("table")) {
    const box = document.createElement("div");
    box.className = "md-table";
    box.tabIndex = 0;
    table.replaceWith(box);
    box.append(table);
  }
  return fragment;
}

function copyButton(pre) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "md-copy";
  button.textContent = "Copy";
  button.setAttribute("aria-label", "Copy code");
  button.addEventListener("click", async () => {
    const code = pre.querySelector("code") || pre;
    const ok = await copyText(code.textContent, code);
    button.textContent = ok ? "Copied" : "Copy failed";
    button.setAttribute("aria-label", ok ? "Code copied" : "Copying failed");
    clearTimeout(button.resetTimer);
    button.resetTimer = setTimeout(() => {
      button.textContent = "Copy";
      button.setAttribute("aria-label", "Copy code");
    }, COPIED_FOR_MS);
  });
  return button;
}

async function copyText(text, node) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // refused (no permission, document not focused): the older way below
    }
  }
  const selection = document.getSelection();
  const range = document.createRange();
  range.selectNodeContents(node);
  selection.removeAllRanges();
  selection.addRange(range);
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  selection.removeAllRanges();
  return ok;
}
