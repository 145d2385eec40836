#!/usr/bin/env bash
# One lent-GPU session's checks, in one call (device tool): CPU against CUDA per workload, the
# probe behind `--device auto` at several sizes, `reproduce --dataset ba_shapes` with
# `--device cpu` against `--device auto`, then the CUDA-only tests. Needs, carried with the call:
# .whl/ (rdkit, captum wheels for the device's Python) and .gpudata/ (a copy of the TU raw data).
# Every log lands in $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD GEM_DATA_ROOT=$PWD/.gpudata PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L; nproc
python3 -c "import torch, torch_geometric, rdkit, captum; print('torch', torch.__version__, 'pyg', torch_geometric.__version__, 'rdkit', rdkit.__version__)"

STAGES=${STAGES:-probe bench reproduce tests}
if [[ " $STAGES " == *" probe "* ]]; then
echo "== probe sizes (ms per run, CPU 2 threads vs CUDA)"
GEM_CACHE_DIR=/tmp/c_probe timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/probe_sizes.log"
import torch
torch.set_num_threads(2)
from gem_core.runtime import device_choice as dc
for trains in (False, True):
    for n in (1, 8, 32, 64, 128, 256, 512, 1024):
        dc.WORKLOADS["_p"] = (n, trains)
        c = dc.measure_workload("_p", torch.device("cpu"))
        g = dc.measure_workload("_p", torch.device("cuda"))
        print(f"graphs={n:5d} trains={trains!s:5s} cpu={c:8.3f} ms cuda={g:8.3f} ms cuda/cpu={g / c:6.2f}")
PY
fi

if [[ " $STAGES " == *" bench "* ]]; then
echo "== bench devices (2 CPU threads)"
GEM_CACHE_DIR=/tmp/c_bench timeout 200 python3 -m gem_core bench devices --threads 2 --limit 128 \
  --json "$OUT/devices.json" 2>&1 | tee "$OUT/devices.log"
fi

if [[ " $STAGES " == *" reproduce "* ]]; then

echo "== reproduce ba_shapes --device cpu (2 threads, empty cache)"
start=$EPOCHREALTIME
GEM_CACHE_DIR=/tmp/c_cpu timeout 150 python3 -m gem_core reproduce --dataset ba_shapes --device cpu \
  --threads 2 --no-progress --json "$OUT/repro_cpu.json" > "$OUT/repro_cpu.log" 2>&1
rc=$?; cpu_s=$(python3 -c "print(round($EPOCHREALTIME - $start, 1))")
echo "rc=$rc seconds=$cpu_s" | tee -a "$OUT/repro_cpu.log"
limit=$(python3 -c "print(int(max(60, 1.5 * $cpu_s)))")
echo "== reproduce ba_shapes --device auto (2 threads, empty cache, limit ${limit}s)"
start=$EPOCHREALTIME
GEM_CACHE_DIR=/tmp/c_auto timeout "$limit" python3 -m gem_core reproduce --dataset ba_shapes --device auto \
  --threads 2 --no-progress --json "$OUT/repro_auto.json" > "$OUT/repro_auto.log" 2>&1
rc=$?; echo "rc=$rc seconds=$(python3 -c "print(round($EPOCHREALTIME - $start, 1))")" | tee -a "$OUT/repro_auto.log"
cat /tmp/c_auto/device-choice.json 2>/dev/null | tee "$OUT/device_choice.json"
python3 -c "import json; print('auto ran on:', json.load(open('$OUT/repro_auto.json'))['machine'])" 2>/dev/null
fi

if [[ " $STAGES " == *" screen "* ]]; then
echo "== screen --device cuda --workers 8 on 4,000 rows, whole stderr kept"
python3 -c "from gem_core.cli.bench_screen import source_smiles as s; m = s()
open('/tmp/lib4k.smi', 'w').writelines(f'{m[i % len(m)]} m{i}\n' for i in range(4000))"
GEM_CACHE_DIR=/tmp/c_screen timeout 120 python3 -X faulthandler -m gem_core screen /tmp/lib4k.smi \
  --out /tmp/lib4k.parquet --device cuda --workers 8 --no-progress --restart > "$OUT/screen_cuda_direct.log" 2>&1
echo "rc=$?" | tee -a "$OUT/screen_cuda_direct.log"; tail -5 "$OUT/screen_cuda_direct.log"
echo "== bench screen, CPU processes against CUDA behind parsing workers (8 workers)"
for dev in cpu cuda; do
  GEM_CACHE_DIR=/tmp/c_screen timeout 150 python3 -m gem_core bench screen --no-ray --workers "${SCREEN_WORKERS:-8}" \
    --rows "${SCREEN_ROWS:-30000}" --device $dev --json "$OUT/screen_$dev.json" 2>&1 \
    | grep -v -i warn | tee "$OUT/screen_$dev.log"
done
fi

if [[ " $STAGES " == *" tests "* ]]; then

echo "== CUDA-only tests"
GEM_CACHE_DIR=/tmp/c_test timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_registry.py \
  tests/test_device.py -k "cuda" 2>&1 | tail -15 | tee "$OUT/pytest_cuda.log"
fi
