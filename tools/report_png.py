"""Render an ffncli HTML report (``--report out.html``) to a PNG with headless Chromium.

    python tools/report_png.py report.html docs/relu-stats-sweep.png [--width 1000]

The page is drawn at ``--width`` pixels and as tall as ``--height`` (default: an estimate from
the report's SVG heights and table rows, so the whole report fits). The report fetches nothing,
and Chromium is run with networking, sync, component updates and the first-run page off, in a
throw-away profile. Not run by the tests or CI; it needs a ``chromium`` (or ``chromium-browser``,
``google-chrome``) on PATH, or ``--chromium PATH``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def estimate_height(html: str) -> int:
    """Pixels the page needs: every SVG's height, every table row, heading and paragraph."""
    svgs = sum(int(h) for h in re.findall(r'<svg width="\d+" height="(\d+)"', html))
    rows = html.count("<tr>")
    blocks = html.count("<h2>") + html.count("<p")
    return 120 + svgs + 22 * rows + 45 * blocks


def screenshot(report: Path, png: Path, width: int, height: int | None,
               chromium: str | None) -> None:
    browser = chromium or next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        sys.exit("error: no chromium found on PATH (apt-get install chromium, or --chromium)")
    html = report.read_text(encoding="utf-8")
    height = height or estimate_height(html)
    with tempfile.TemporaryDirectory() as profile:
        args = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--hide-scrollbars",
                f"--user-data-dir={profile}", f"--screenshot={png.resolve()}",
                f"--window-size={width},{height}", report.resolve().as_uri()]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.is_file():
        sys.exit(f"error: {browser} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    print(f"wrote {png} ({width} x {height})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="an HTML report written by --report")
    parser.add_argument("png", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--height", type=int, default=None)
    parser.add_argument("--chromium", default=None, help="the browser to run")
    args = parser.parse_args()
    screenshot(args.report, args.png, args.width, args.height, args.chromium)


if __name__ == "__main__":
    main()
