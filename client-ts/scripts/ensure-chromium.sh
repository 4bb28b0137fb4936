#!/usr/bin/env bash
# Make sure Debian's Chromium is installed at /usr/bin/chromium (for the headless vector run).
# Idempotent: does nothing when it is already there. Installs with apt-get (needs root, as on
# the project's machines and CI). The browser is driven by playwright-core with
# executablePath=/usr/bin/chromium; `npx playwright install` (a browser download) is never used.
set -euo pipefail
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-chromium: $CHROMIUM is missing and we are not root: apt-get install chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
"$CHROMIUM" --version 2>/dev/null || true
