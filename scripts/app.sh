#!/usr/bin/env bash
# Install the project and start the Gem Explorer app on http://localhost:8501
# Usage: bash scripts/app.sh [extra streamlit args]
set -euo pipefail
cd "$(dirname "$0")/.."
# Install once per version of the requirements: a stamp named after the hash of
# requirements.txt, pyproject.toml and this checkout's path says the install finished here
# (pip re-checking an installed environment costs seconds at every start).
stamp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gem-explorer"
stamp="$stamp_dir/installed-$(cat requirements.txt pyproject.toml <(pwd) | sha256sum | cut -c1-16)"
installed_here='import os, gem_core, streamlit; here = os.path.realpath(".") + os.sep
raise SystemExit(not os.path.realpath(gem_core.__file__).startswith(here))'
if [ ! -f "$stamp" ] || ! python3 -c "$installed_here" >/dev/null 2>&1; then
  python3 -m pip install -q -r requirements.txt
  mkdir -p "$stamp_dir" && touch "$stamp"
fi
if [ -z "${GEM_DATA_ROOT:-}" ] && [ -d ../shared/data/TUDataset ]; then
  export GEM_DATA_ROOT="$(cd ../shared/data/TUDataset && pwd)"
fi
# One CPU thread per process (torch and BLAS) is fastest for these small graphs and keeps
# concurrent sessions from fighting over the cores; set GEM_NUM_THREADS to override.
export GEM_NUM_THREADS="${GEM_NUM_THREADS:-1}"
exec python3 -m streamlit run app/streamlit_app.py "$@"
