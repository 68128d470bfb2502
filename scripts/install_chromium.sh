#!/usr/bin/env bash
# Debian's Chromium, for tests/test_pages.py (the offline pages of scripts/pages.py, opened in headless Chromium).
# Run by scripts/test.sh where CI is set; by hand: sudo bash scripts/install_chromium.sh. Installs only (never removes a
# package). Exits 0 and says why when it cannot install (not root, no apt-get): the test is then skipped outside CI.
set -euo pipefail
for c in chromium chromium-browser google-chrome; do command -v "$c" >/dev/null && exit 0; done
if [ "$(id -u)" != 0 ]; then echo "install_chromium.sh: not root, Chromium not installed (tests/test_pages.py needs it)" >&2; exit 0; fi
if ! command -v apt-get >/dev/null; then echo "install_chromium.sh: no apt-get, Chromium not installed (tests/test_pages.py needs it)" >&2; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
echo "Installing chromium (for tests/test_pages.py)..." >&2
install() { apt-get install -y -q --no-install-recommends chromium >/tmp/diffgeo-install-chromium.log 2>&1; }
install || { apt-get update -q >>/tmp/diffgeo-install-chromium.log 2>&1 && install; } ||
  { echo "install_chromium.sh: apt-get failed (log: /tmp/diffgeo-install-chromium.log); tests/test_pages.py needs Chromium" >&2; exit 0; }
