"""How Debian's Chromium is launched here (tests and docs/screenshots.py): no downloaded browser, no sandbox as root."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# no sandbox as root, and no background calls to hosts the closed network refuses
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
