#!/usr/bin/env bash
# Install the engine and the app into .venv and start the Gem Explorer app on
# http://localhost:8501. Usage: bash scripts/app.sh [extra streamlit args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
gem_install requirements.txt
if [ -z "${GEM_DATA_ROOT:-}" ] && [ -d ../shared/data/TUDataset ]; then
  export GEM_DATA_ROOT="$(cd ../shared/data/TUDataset && pwd)"
fi
# One CPU thread per process (torch and BLAS) is fastest for these small graphs and keeps
# concurrent sessions from fighting over the cores; set GEM_NUM_THREADS to override.
export GEM_NUM_THREADS="${GEM_NUM_THREADS:-1}"
exec "$GEM_PY" -m streamlit run app/streamlit_app.py "$@"
