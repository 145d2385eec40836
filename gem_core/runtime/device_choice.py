"""``--device auto`` chosen by measurement: per workload, the device measured faster on this machine.

On an H100 every workload of this project ran slower than on 2 CPU cores (small graphs: kernel
launches and host-device syncs, not arithmetic), so "CUDA when present" made a user with a GPU wait
4-15x longer. Here ``auto`` is CPU unless CUDA is present *and* a short probe of the workload ran
faster on it by the workload's margin. The probe is a small GCN-shaped job of the workload's shape
(one graph forward for an interactive explanation, a few hundred graphs for a batched one,
forward + backward + step for a fit), timed on both devices (median of a few runs after warm-up).
Its times are cached in the store (``device-choice.json``), keyed by the torch version, the GPU's
name and the CPU thread count, so it runs once per machine; the verdict is drawn from them at each
call. ``cuda`` or ``cpu`` given explicitly are never second-guessed.

The margins (:data:`CUDA_MARGIN`) come from ``bench devices`` on an H200 with 2 CPU threads (two
runs, 2026-11-26): a probe tells the real work's direction only roughly, since real loops launch
more and smaller kernels and do CPU-side work the probe has not, and it varies from run to run.
Probe (CUDA's lead) against the real work on the CUDA side (ratio of ms per instance):

- batched: probe 2.3-3.5x ahead; Gem 1.2x slower (BA-shapes) / 1.2x faster (Mutagenicity),
  GNNExplainer 1.5x slower / 1.1-1.5x faster, Integrated Gradients 3.7-6.2x faster;
- distillation: probe 3.7-10.3x ahead; 1.9-2.4x faster (BA-shapes), 1.0-1.1x slower
  (Mutagenicity);
- fit: probe 0.9-1.5x; 1.5-2.0x slower;
- screen: probe 6.2-9.5x ahead; a chunk 0.96-1.05x (the model is about a fifth of a chunk's
  time: parsing, toxicophores and fragment SMILES stay on the CPU);
- interactive: probe 2.7-3.3x behind; 1.2-2.3x slower.

Gem alone over a library in one call (``bench devices --library 10000,100000``, an H200 with 2 CPU
threads, 2026-11-30): Mutagenicity's molecules repeated to 10,000 / 100,000, 0.137 / 0.107 ms per
molecule on the CPU, 0.019 / 0.022 on CUDA (7.4x / 4.9x faster); the test split (434) 2.5x faster;
BA-shapes' batched Gem 1.8x slower. ``auto`` (the ``batched`` probe, 2.1x ahead there) kept the CPU:
no command explains a library with Gem alone on ``auto`` (``screen`` parses on the CPU and ran a
chunk 1.7x slower on CUDA; the PyG adapter runs where the user's data is), so ``--device cuda`` is
the way to it.

The margins keep ``auto`` off CUDA for every workload that ran slower there. The probe cannot
tell those from the ones CUDA wins, so CUDA's real gains (Integrated Gradients, BA-shapes'
distillation, Mutagenicity's batched Gem and GNNExplainer) are left to ``--device cuda``: never
picking the slower device came first. A run made of several workloads (``reproduce``: fits,
distillations, batched explanations) goes to CUDA only when every one of them does
(:func:`choose_for_run`): when the batched probe alone chose its device, ``reproduce --dataset
ba_shapes`` ran on the H200 and had not finished after 83 s; on the CPU it took 53-56 s.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

import torch

WORKLOADS: dict[str, tuple[int, bool]] = {
    # workload -> (graphs per forward pass, whether it trains)
    "interactive": (1, False),  # one instance explained in the app or by `explain`
    "batched": (256, False),  # a split explained at once (reproduce, the app's batches)
    "distillation": (512, False),  # the Δ phase's deleted-edge copies
    "fit": (64, True),  # training Gem / PGExplainer / a target, mini-batches
    "screen": (1024, False),  # a screening chunk's forward pass
}
#: how many times faster than the CPU the probe must measure CUDA before ``auto`` picks it
CUDA_MARGIN: dict[str, float] = {
    "interactive": 1.5,
    "batched": 4.0,
    "distillation": 12.0,
    "fit": 3.0,
    "screen": 20.0,
}
#: the workloads of a ``reproduce`` run, all on one workbench (one device)
REPRODUCE_WORKLOADS: tuple[str, ...] = ("fit", "distillation", "batched")
_CACHE_FILE = "device-choice.json"


@dataclass(frozen=True)
class DeviceChoice:
    """Which device ``auto`` runs a workload on, and why (said in the sidebar and the timings)."""

    workload: str
    device: str
    reason: str
    cpu_ms: Optional[float] = None
    cuda_ms: Optional[float] = None


# (workload, device) -> milliseconds of one probe run; replaced in tests by a stub
Probe = Callable[[str, torch.device], float]


def _probe_graphs(
    num_graphs: int, device: torch.device, nodes: int = 30, features: int = 14
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of ``num_graphs`` ring-shaped graphs of ``nodes`` nodes (molecule-sized)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(num_graphs * nodes, features, generator=gen)
    ring = torch.arange(nodes)
    src = (ring.unsqueeze(0) + nodes * torch.arange(num_graphs).unsqueeze(1)).reshape(-1)
    dst = ((ring + 1) % nodes).unsqueeze(0) + nodes * torch.arange(num_graphs).unsqueeze(1)
    edge_index = torch.stack([torch.cat([src, dst.reshape(-1)]), torch.cat([dst.reshape(-1), src])])
    batch = torch.arange(num_graphs).repeat_interleave(nodes)
    return x.to(device), edge_index.to(device), batch.to(device)


def measure_workload(workload: str, device: torch.device, repeats: int = 5) -> float:
    """Milliseconds of one run of ``workload``'s probe on ``device`` (median after warm-up)."""
    from torch_geometric.nn import GCNConv, global_max_pool

    num_graphs, trains = WORKLOADS[workload]
    torch.manual_seed(0)
    convs = torch.nn.ModuleList([GCNConv(14, 20), GCNConv(20, 20), GCNConv(20, 20)]).to(device)
    head = torch.nn.Linear(20, 2).to(device)
    params = list(convs.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=0.01) if trains else None
    x, edge_index, batch = _probe_graphs(num_graphs, device)

    def run() -> None:
        with torch.set_grad_enabled(trains):
            h = x
            for conv in convs:
                h = torch.relu(conv(h, edge_index))
            out = head(global_max_pool(h, batch, size=num_graphs))
            if opt is not None:
                opt.zero_grad()
                out.logsumexp(-1).mean().backward()
                opt.step()
            else:
                out.argmax(-1).tolist()  # the host reads the answer, as every caller does

    times = []
    for i in range(repeats + 2):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tic = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:  # warm-up runs (kernel loading, allocator) are not counted
            times.append(1000.0 * (time.perf_counter() - tic))
    return statistics.median(times)


def _machine_key() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return f"torch {torch.__version__} | {gpu} | {torch.get_num_threads()} CPU threads"


def _cache_path():
    from gem_core.runtime.store import cache_dir

    return cache_dir() / _CACHE_FILE


def _read_cache() -> dict:
    try:
        data = json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(data: dict) -> None:
    from gem_core.runtime.store import atomic_path

    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass  # an unwritable cache only means the probe runs again next time


def _verdict(workload: str, cpu_ms: float, cuda_ms: float) -> DeviceChoice:
    """CUDA where the probe measured it faster than the CPU by the workload's margin."""
    speedup = cpu_ms / max(cuda_ms, 1e-9)
    margin = CUDA_MARGIN[workload]
    times = f"CPU {cpu_ms:.2f} ms, CUDA {cuda_ms:.2f} ms per probe"
    if speedup > margin:
        reason = (
            f"measured faster for {workload} work on this machine ({times}: CUDA "
            f"{speedup:.1f}x ahead, over the {margin:g}x it must be)"
        )
        return DeviceChoice(workload, "cuda", reason, cpu_ms, cuda_ms)
    if speedup > 1.0:
        reason = (
            f"CUDA's lead on the {workload} probe is too small to pay off in real work "
            f"({times}: {speedup:.1f}x, under the {margin:g}x it must be)"
        )
    else:
        reason = (
            f"measured faster for {workload} work on this machine "
            f"({times}, {1.0 / max(speedup, 1e-9):.1f}x)"
        )
    return DeviceChoice(workload, "cpu", reason, cpu_ms, cuda_ms)


def choose_device(
    workload: str = "interactive",
    probe: Optional[Probe] = None,
    cuda_available: Optional[bool] = None,
) -> DeviceChoice:
    """The device ``auto`` means for ``workload``: CPU without CUDA; with CUDA the one the probe
    measured faster by the workload's margin (CPU otherwise: it needs no transfers), the
    measurement remembered per machine."""
    if workload not in WORKLOADS:
        raise ValueError(f"Unknown workload {workload!r}. Choose one of: {', '.join(WORKLOADS)}.")
    has_cuda = torch.cuda.is_available() if cuda_available is None else cuda_available
    if not has_cuda:
        return DeviceChoice(workload, "cpu", "no CUDA device")
    forced = os.environ.get("GEM_AUTO_DEVICE")
    if forced in ("cpu", "cuda"):
        return DeviceChoice(workload, forced, f"GEM_AUTO_DEVICE={forced}")
    key = _machine_key()
    cache = _read_cache()
    known = cache.get(key, {}).get(workload)
    if isinstance(known, dict):
        try:
            return _verdict(workload, float(known["cpu_ms"]), float(known["cuda_ms"]))
        except (KeyError, TypeError, ValueError):
            pass  # an entry of another shape: measured again
    measure = probe or measure_workload
    cpu_ms = float(measure(workload, torch.device("cpu")))
    cuda_ms = float(measure(workload, torch.device("cuda")))
    cache.setdefault(key, {})[workload] = {"cpu_ms": cpu_ms, "cuda_ms": cuda_ms}
    _write_cache(cache)
    return _verdict(workload, cpu_ms, cuda_ms)


def choose_for_run(
    workloads: Sequence[str], probe: Optional[Probe] = None, cuda_available: Optional[bool] = None
) -> DeviceChoice:
    """One device for a run made of several ``workloads`` on one workbench: CUDA only where
    ``auto`` picks CUDA for every one of them (a single slower part can cost more than the
    others save: ``reproduce`` on BA-shapes took 55 s on 2 CPU threads and over 83 s on an
    H200)."""
    if not workloads:
        raise ValueError("choose_for_run needs at least one workload")
    choices = [choose_device(w, probe=probe, cuda_available=cuda_available) for w in workloads]
    name = "+".join(workloads)
    slower = [c for c in choices if c.device != "cuda"]
    if not slower:
        return DeviceChoice(name, "cuda", "; ".join(c.reason for c in choices))
    if len(slower) == len(choices) and slower[0].reason == "no CUDA device":
        return DeviceChoice(name, "cpu", "no CUDA device")
    return DeviceChoice(name, "cpu", "; ".join(f"{c.workload}: {c.reason}" for c in slower))
