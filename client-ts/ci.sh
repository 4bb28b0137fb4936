#!/usr/bin/env bash
# CI of the TypeScript device SDK (client-ts): install from the lockfile, check the generated
# wire descriptor, type-check the core without Node's types, type-check and build (ES modules and
# CommonJS), check the package as an app installs it (scripts/package-check.mjs: require and import
# of every entry, tsc node10/node16/bundler, the README web snippet's bundle size), run the node:test
# suites (conformance vectors, privacy audits, ledger and the ledger store contract, both
# transports, the Python collector on loopback over gRPC, Connect and gRPC-Web), then in headless
# Chromium the conformance vectors and the browser devices (scripts/browser-fleet.mjs: the
# IndexedDB store contract, 1000 devices over Connect and gRPC-Web through a collector restart,
# two tabs on one store, CORS) and the web first run (scripts/browser-first-run.mjs: the page
# served by `uldp collector serve --dev-example`, the README's CA recipe, the page's diagnoses).
#
#   bash client-ts/ci.sh            (from anywhere; Node 20 and npm needed)
#
# ULDP_PYTHON: a Python with the uldp package installed, for the collector test (default:
# `python` if it can import uldp.collector, else `python3`).
set -euo pipefail
cd "$(dirname "$0")"
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
start=$(date +%s)

if [ -z "${ULDP_PYTHON:-}" ]; then
  if command -v python >/dev/null && python -c "import uldp.collector.cli" 2>/dev/null; then
    ULDP_PYTHON=$(command -v python)
  else
    ULDP_PYTHON=python3
  fi
fi
export ULDP_PYTHON

echo "== npm ci (lockfile) (t=$(( $(date +%s) - start ))s)"
npm ci --no-audit --no-fund --loglevel=error 2>&1 | grep -v 'Unknown user config' || true
test -d node_modules/@noble/ciphers  # npm ci failed if this is missing

echo "== generated wire descriptor is up to date (t=$(( $(date +%s) - start ))s)"
node scripts/gen-proto-json.mjs --check

echo "== type check of the core without Node types (t=$(( $(date +%s) - start ))s)"
npx tsc -p tsconfig.core.json

echo "== type check and build (t=$(( $(date +%s) - start ))s)"
rm -rf build
npx tsc -p tsconfig.json

echo "== the package: CommonJS half, then the tarball installed in a fresh project (t=$(( $(date +%s) - start ))s)"
node scripts/build-package.mjs
node scripts/package-check.mjs

echo "== node:test (t=$(( $(date +%s) - start ))s)"
node --test build/test/*.test.js

echo "== headless Chromium (t=$(( $(date +%s) - start ))s)"
bash scripts/ensure-chromium.sh
node scripts/browser-vectors.mjs

echo "== the example web app: type check and build (t=$(( $(date +%s) - start ))s)"
npx tsc -p ../examples/web
node scripts/build-example.mjs

echo "== the web first run: the collector serves the example page, the CA recipe, the errors (t=$(( $(date +%s) - start ))s)"
node scripts/browser-first-run.mjs

echo "== browser devices against the collector (t=$(( $(date +%s) - start ))s)"
node scripts/browser-fleet.mjs

echo "client-ts ci: $(( $(date +%s) - start )) s"
