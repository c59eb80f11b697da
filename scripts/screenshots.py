"""The README's pictures, made again from the running product: the chat, the shared page and
the session list, at 1280 and 390 px, in the light and the dark colour scheme.

    ./dev screenshots                       # or: .venv/bin/python -m scripts.screenshots
    .venv/bin/python -m scripts.screenshots --out /tmp/pictures

It starts its own server in embedded mode (a temporary SQLite database and workspace), logs in
as the demo user, makes a session as a user would (Markdown, a tool call, a file open in its
viewer), shares it, and photographs each page with Debian's Chromium. Each picture is written
as an 8-bit palette PNG (the 256 most used colours, each pixel its nearest), so the twelve of
them weigh a few hundred KB together: docs/img/<page>-<width>-<scheme>.png.
"""

from __future__ import annotations

import argparse
import base64
import shutil
import struct
import sys
import tempfile
import zlib
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from tests.support.embedded_server import EmbeddedServer

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
WIDTHS = {1280: 800, 390: 844}
SCHEMES = ("light", "dark")

SCRIPT = (
    "say ## Plan\\n\\n1. read the notes\\n2. **write** the summary\\n\\n"
    "```python\\nfrom pathlib import Path\\nprint(Path('notes.txt').read_text())  # the notes\\n```"
    "\\n\\n| file | lines |\\n|---|---:|\\n| notes.txt | 2 |\n"
    "write notes.txt first line\nsay Done: `notes.txt` is written."
)

# The page's pixels as an indexed image: the 256 colours most used (buckets of 5 bits a
# channel, each the average of its pixels), every pixel mapped to the nearest.
QUANTIZE = """async (png) => {
  const img = new Image();
  img.src = 'data:image/png;base64,' + png;
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = img.width; canvas.height = img.height;
  const g = canvas.getContext('2d');
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, img.width, img.height).data;
  const key = (i) => ((d[i] >> 3) << 10) | ((d[i + 1] >> 3) << 5) | (d[i + 2] >> 3);
  const sums = new Map();
  for (let i = 0; i < d.length; i += 4) {
    const k = key(i);
    const s = sums.get(k) || [0, 0, 0, 0];
    s[0] += d[i]; s[1] += d[i + 1]; s[2] += d[i + 2]; s[3]++;
    sums.set(k, s);
  }
  const top = [...sums.entries()].sort((a, b) => b[1][3] - a[1][3]).slice(0, 256);
  const palette = top.map(([, s]) => s.slice(0, 3).map((v) => Math.round(v / s[3])));
  const index = new Map(top.map(([k], n) => [k, n]));
  const near = (k) => {
    if (index.has(k)) return index.get(k);
    const s = sums.get(k), r = s[0] / s[3], gg = s[1] / s[3], b = s[2] / s[3];
    let best = 0, dist = Infinity;
    palette.forEach((p, n) => {
      const e = (p[0] - r) ** 2 + (p[1] - gg) ** 2 + (p[2] - b) ** 2;
      if (e < dist) { dist = e; best = n; }
    });
    index.set(k, best);
    return best;
  };
  let out = '';
  const chunk = [];
  for (let i = 0; i < d.length; i += 4) {
    chunk.push(near(key(i)));
    if (chunk.length === 8192) { out += String.fromCharCode(...chunk); chunk.length = 0; }
  }
  out += String.fromCharCode(...chunk);
  return { width: img.width, height: img.height, palette: palette.flat(), pixels: btoa(out) };
}"""


def png8(width: int, height: int, palette: list[int], pixels: bytes) -> bytes:
    """A PNG of colour type 3 (palette), each row unfiltered."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\0" + pixels[y * width : (y + 1) * width] for y in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0))
        + chunk(b"PLTE", bytes(palette))
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def login(page: Page, url: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")


def prepare(page: Page, url: str) -> tuple[str, str]:
    """A session as a user leaves it: its chat's address and its share link."""
    login(page, url)
    page.get_by_role("button", name="New session").click()
    page.wait_for_url("**/sessions/ses_*/")
    page.fill("#prompt", SCRIPT)
    page.click("#send")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#messages .msg.assistant .text')]"
        ".some(t => t.textContent.startsWith('Done'))",
        timeout=60_000,
    )
    page.wait_for_function("() => document.getElementById('status').textContent.trim() === 'idle'")
    chat = page.url
    page.click("#session-menu summary")
    page.click("#share")
    page.wait_for_selector("#share-box:not([hidden])")
    return chat, page.input_value("#share-url")


def shoot(browser, blank: Page, url: str, target: str, name: Path, width: int, scheme: str) -> None:  # noqa: ANN001
    context = browser.new_context(
        viewport={"width": width, "height": WIDTHS[width]},
        color_scheme=scheme,
        has_touch=width < 800,
        is_mobile=width < 800,
    )
    try:
        page = context.new_page()
        login(page, url)
        page.goto(target)
        page.wait_for_load_state("networkidle")
        if "/sessions/" in target:
            page.locator("#messages .md pre code.hljs").first.wait_for()
            if width >= 800:
                page.locator("#files li", has_text="notes.txt").get_by_role("button").click()
                page.locator("#file-view pre").wait_for()
        page.wait_for_timeout(300)
        shot = page.screenshot()
    finally:
        context.close()
    image = blank.evaluate(QUANTIZE, base64.b64encode(shot).decode())
    name.write_bytes(
        png8(image["width"], image["height"], image["palette"], base64.b64decode(image["pixels"]))
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="agentplat-screenshots-"))
    server = EmbeddedServer(
        tmp,
        AGENT_ALLOW_SHELL="false",
        SCRIPTED_DEFAULT_PACE_MS="0",
        SECRET_KEY_FILE=str(tmp / "secret_key"),  # nothing written into the checkout
    )
    try:
        server.start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM if Path(CHROMIUM).exists() else None,
                args=["--headless", "--no-sandbox", "--disable-gpu"],
            )
            setup = browser.new_context(viewport={"width": 1280, "height": 800})
            chat, shared = prepare(setup.new_page(), server.url)
            setup.close()
            blank = browser.new_page()
            pages = {"chat": chat, "shared": shared, "list": f"{server.url}/"}
            total = 0
            for page_name, target in pages.items():
                for width in WIDTHS:
                    for scheme in SCHEMES:
                        name = args.out / f"{page_name}-{width}-{scheme}.png"
                        shoot(browser, blank, server.url, target, name, width, scheme)
                        total += name.stat().st_size
                        print(
                            f"{name.relative_to(ROOT) if name.is_relative_to(ROOT) else name}"
                            f"  {name.stat().st_size // 1024} KB"
                        )
            browser.close()
            print(f"{total // 1024} KB in all")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
