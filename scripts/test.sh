#!/usr/bin/env bash
# Install everything the tests need into .venv (the engine, the app, the test tools and the Ray
# extra; Debian's Chromium for the browser tests) and run the whole test suite.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
gem_install requirements-test.txt

if [ -z "${GEM_SKIP_BROWSER_INSTALL:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    _gem_sudo apt-get update -qq && _gem_sudo apt-get install -y -qq chromium >/dev/null \
      || echo "warning: could not install chromium; browser tests will be skipped" >&2
  fi
fi

# Raw TU data for Mutagenicity / NCI1: default to ../shared/data/TUDataset when present.
if [ -z "${GEM_DATA_ROOT:-}" ] && [ -d ../shared/data/TUDataset ]; then
  export GEM_DATA_ROOT="$(cd ../shared/data/TUDataset && pwd)"
fi
export GEM_NUM_THREADS="${GEM_NUM_THREADS:-1}"
# With Chromium present a browser test that cannot run fails instead of being skipped.
if command -v chromium >/dev/null 2>&1 || [ -n "${GEM_CHROMIUM:-}" ]; then
  export GEM_REQUIRE_BROWSER="${GEM_REQUIRE_BROWSER:-1}"
fi
exec "$GEM_PY" -m pytest "$@"
