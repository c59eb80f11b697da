#!/usr/bin/env bash
# Vendors the browser libraries of the chat UI into static/vendor/, at pinned versions, from
# the npm registry through the ordinary client (`npm pack`), with their licences, and writes
# static/vendor/README.md. Idempotent: run it again and the tree comes out byte for byte the
# same. The vendored files are committed, so CI and offline users need no npm; run this only
# to change a version (edit the pins below, run, review the diff, commit).
#
#   scripts/vendor.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# -- the pins ---------------------------------------------------------------------------------
MARKDOWN_IT=15.0.3
DOMPURIFY=3.5.0
HIGHLIGHTJS=11.12.0 # @highlightjs/cdn-assets: the prebuilt browser builds of highlight.js
AXE_CORE=4.14.1
# Bundled inside markdown-it's browser build; only their licence files are vendored.
ENTITIES=8.1.0
LINKIFY_IT=6.1.0
MDURL=2.1.0
PUNYCODE_JS=2.3.1
UC_MICRO=3.0.0

command -v npm >/dev/null || { echo "vendor.sh: npm is needed (apt-get install npm)" >&2; exit 1; }

OUT=static/vendor
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# fetch <name> <version>: the package's tarball, extracted; prints the package directory.
fetch() {
  local name=$1 version=$2 dir tarball
  dir="$WORK/$(echo "$name" | tr '/@' '__')-$version"
  mkdir -p "$dir"
  tarball=$(cd "$dir" && npm pack --silent "$name@$version" | tail -n 1)
  tar -xzf "$dir/$tarball" -C "$dir"
  echo "$dir/package"
}

# put <from> <to>: copies a file, dropping a trailing `//# sourceMappingURL=` line (the maps
# are not vendored; a browser with devtools open would otherwise ask for them and get a 404).
put() {
  mkdir -p "$(dirname "$2")"
  sed -e '/^\/\/# sourceMappingURL=/d' "$1" >"$2"
}

rm -rf "$OUT"
mkdir -p "$OUT"

pkg=$(fetch markdown-it "$MARKDOWN_IT")
put "$pkg/dist/browser/markdown-it.esm.min.mjs" "$OUT/markdown-it/markdown-it.esm.min.mjs"
cp "$pkg/LICENSE" "$OUT/markdown-it/LICENSE"
for dep in "entities $ENTITIES" "linkify-it $LINKIFY_IT" "mdurl $MDURL" "punycode.js $PUNYCODE_JS" "uc.micro $UC_MICRO"; do
  set -- $dep
  dpkg=$(fetch "$1" "$2")
  cp "$(ls "$dpkg"/LICEN[CS]E* | head -n 1)" "$OUT/markdown-it/LICENSE.$1"
done

pkg=$(fetch dompurify "$DOMPURIFY")
put "$pkg/dist/purify.es.mjs" "$OUT/dompurify/purify.es.mjs"
cp "$pkg/LICENSE" "$OUT/dompurify/LICENSE"
[ -f "$pkg/LICENSE-MPL" ] && cp "$pkg/LICENSE-MPL" "$OUT/dompurify/LICENSE-MPL"

pkg=$(fetch @highlightjs/cdn-assets "$HIGHLIGHTJS")
put "$pkg/es/highlight.min.js" "$OUT/highlight.js/highlight.min.js"
put "$pkg/styles/a11y-light.min.css" "$OUT/highlight.js/a11y-light.min.css"
cp "$pkg/LICENSE" "$OUT/highlight.js/LICENSE"

pkg=$(fetch axe-core "$AXE_CORE")
put "$pkg/axe.min.js" "$OUT/axe-core/axe.min.js"
cp "$pkg/LICENSE" "$OUT/axe-core/LICENSE"
cp "$pkg/LICENSE-3RD-PARTY.txt" "$OUT/axe-core/LICENSE-3RD-PARTY.txt"

# The highlight.js languages in the common bundle, read from the bundle itself.
LANGS=$(grep -o 'grmr_[a-z0-9_]*' "$OUT/highlight.js/highlight.min.js" | sed 's/^grmr_//' | grep -v '^$' | sort -u | tr '_' '-' | paste -sd ' ' | sed 's/ /, /g')

size() { wc -c <"$1" | awk '{printf "%.0f KB", $1 / 1024}'; }

cat >"$OUT/README.md" <<EOF
# Vendored browser libraries

Written by \`scripts/vendor.sh\`; do not edit by hand. The files are committed so that CI and
offline users need no npm. To change a version: edit the pins at the top of the script, run
it, review the diff, commit.

Every file is the package's own prebuilt browser build, unchanged but for the removal of a
trailing \`//# sourceMappingURL=\` comment (the source maps are not vendored). They are served
from \`/static/vendor/\`, which the Content-Security-Policy (\`script-src 'self'\`,
\`style-src 'self'\`) allows.

| package | version | licence | files |
|---|---|---|---|
| markdown-it | $MARKDOWN_IT | MIT (bundles entities $ENTITIES: BSD-2-Clause; linkify-it $LINKIFY_IT, mdurl $MDURL, punycode.js $PUNYCODE_JS, uc.micro $UC_MICRO: MIT) | \`markdown-it/markdown-it.esm.min.mjs\` ($(size "$OUT/markdown-it/markdown-it.esm.min.mjs")), \`LICENSE\`, \`LICENSE.<bundled package>\` |
| dompurify | $DOMPURIFY | MPL-2.0 OR Apache-2.0 | \`dompurify/purify.es.mjs\` ($(size "$OUT/dompurify/purify.es.mjs")), \`LICENSE\`, \`LICENSE-MPL\` |
| @highlightjs/cdn-assets (highlight.js) | $HIGHLIGHTJS | BSD-3-Clause | \`highlight.js/highlight.min.js\` ($(size "$OUT/highlight.js/highlight.min.js")), \`highlight.js/a11y-light.min.css\`, \`LICENSE\` |
| axe-core | $AXE_CORE | MPL-2.0 (bundles MIT-licensed code: \`LICENSE-3RD-PARTY.txt\`) | \`axe-core/axe.min.js\` ($(size "$OUT/axe-core/axe.min.js")), \`LICENSE\`, \`LICENSE-3RD-PARTY.txt\` |

## Why these files

* **markdown-it** \`dist/browser/markdown-it.esm.min.mjs\`: the package ships an ES module
  browser build with its dependencies bundled (its \`./browser\` export), so
  \`static/markdown.js\` imports it like the others; no classic \`<script>\` and no global
  (the UMD build, \`markdown-it.umd.min.js\`, would set \`globalThis.markdownit\`).
* **DOMPurify** \`dist/purify.es.mjs\`: the package's ES module build (there is no minified
  one; it is small anyway). It sanitises what markdown-it renders before it reaches the DOM.
* **highlight.js** \`es/highlight.min.js\` of \`@highlightjs/cdn-assets\`: the ES module build
  of the common bundle, with the languages $LANGS (no extra language files). \`styles/a11y-light.min.css\`:
  a light theme, as the chat is light, whose colours all reach the WCAG AA contrast ratio (4.5:1)
  on its background (the \`github\` theme's orange, #e36209 on white, is 3.5:1 and fails the
  accessibility test's colour-contrast check).
* **axe-core** \`axe.min.js\`: used only by the accessibility test
  (\`tests/e2e/test_browser_a11y.py\`), which injects it into pages; no template loads it.

## How a page loads them

\`static/markdown.js\` imports the three scripts itself (relative ES module imports), so a
template links only the two style sheets, in its \`{% block head %}\` (after \`app.css\`, which
\`base.html\` links), and loads its own module, which imports \`markdown.js\`:

\`\`\`html
{% block head %}<link rel="stylesheet" href="{% static 'vendor/highlight.js/a11y-light.min.css' %}">
  <link rel="stylesheet" href="{% static 'markdown.css' %}">{% endblock %}
...
{% block scripts %}<script type="module" src="{% static 'app.js' %}"></script>{% endblock %}
\`\`\`

\`\`\`js
import { renderMarkdown, renderInto } from "./markdown.js";
\`\`\`

\`templates/app/shared.html\` and \`static/shared.js\` do exactly this.
EOF

echo "vendored into $OUT:"
find "$OUT" -type f | sort | while read -r f; do printf '  %-55s %s\n' "$f" "$(size "$f")"; done
