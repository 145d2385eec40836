#!/usr/bin/env bash
# Install the project and start the Gem Explorer app on http://localhost:8501
# Usage: bash scripts/app.sh [extra streamlit args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements.txt
if [ -z "${GEM_DATA_ROOT:-}" ] && [ -d ../shared/data/TUDataset ]; then
  export GEM_DATA_ROOT="$(cd ../shared/data/TUDataset && pwd)"
fi
if [ -f app/streamlit_app.py ]; then
  exec python3 -m streamlit run app/streamlit_app.py "$@"
else
  exec python3 -m gem_core train --dataset ba_shapes
fi
