#!/usr/bin/env bash
# Make sure Debian's Chromium is installed at /usr/bin/chromium (for the headless runs), and
# certutil (libnss3-tools: the README's recipe to trust the development CA in Chromium on Linux,
# checked by scripts/browser-first-run.mjs). Idempotent: does nothing when both are there.
# Installs with apt-get (needs root, as on the project's machines and CI). The browser is driven
# by playwright-core with executablePath=/usr/bin/chromium; `npx playwright install` (a browser
# download) is never used.
set -euo pipefail
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
want=()
[ -x "$CHROMIUM" ] || want+=(chromium)
command -v certutil >/dev/null || want+=(libnss3-tools)
if [ ${#want[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-chromium: missing ${want[*]} and we are not root: apt-get install ${want[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
"$CHROMIUM" --version 2>/dev/null || true
