#!/usr/bin/env bash
# Make sure the PostgreSQL server binaries (initdb, pg_ctl, postgres) are installed, for the
# tests that run a real PostgreSQL (tests/service/conftest.py starts it on a temporary
# directory and a loopback port; nothing is configured system-wide). Idempotent: does
# nothing when they are found on PATH, in /usr/local/bin or in /usr/lib/postgresql/*/bin.
# Installs Debian's `postgresql` with apt-get (needs root, as on the project's machines and
# CI); the test suite runs it under CI=true only, and then fails (never skips) if
# PostgreSQL is still missing.
set -euo pipefail
found() {
  command -v initdb >/dev/null 2>&1 || [ -x /usr/local/bin/initdb ] \
    || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
if found; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-postgres: PostgreSQL (initdb, pg_ctl, postgres) is missing and we are not root: apt-get install postgresql" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
found
