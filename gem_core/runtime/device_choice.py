"""``--device auto`` chosen by measurement: per workload, the device measured faster on this machine.

On an H100 every workload of this project ran slower than on 2 CPU cores (small graphs: kernel
launches and host-device syncs, not arithmetic), so "CUDA when present" made a user with a GPU wait
4-15x longer. Here ``auto`` is CPU unless CUDA is present *and* a short probe of the workload ran
faster on it. The probe is a small GCN-shaped job of the workload's shape (one graph forward for an
interactive explanation, a few hundred graphs for a batched one, forward + backward + step for a
fit), timed on both devices (median of a few runs after warm-up). Its verdict is cached in the store
(``device-choice.json``), keyed by the torch version, the GPU's name and the CPU thread count, so it
runs once per machine. ``cuda`` or ``cpu`` given explicitly are never second-guessed.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Optional

import torch

WORKLOADS: dict[str, tuple[int, bool]] = {
    # workload -> (graphs per forward pass, whether it trains)
    "interactive": (1, False),     # one instance explained in the app or by `explain`
    "batched": (256, False),       # a split explained at once (reproduce, the app's batches)
    "distillation": (512, False),  # the Δ phase's deleted-edge copies
    "fit": (64, True),             # training Gem / PGExplainer / a target, mini-batches
    "screen": (1024, False),       # a screening chunk's forward pass
}
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


def _probe_graphs(num_graphs: int, device: torch.device, nodes: int = 30,
                  features: int = 14) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def choose_device(workload: str = "interactive", probe: Optional[Probe] = None,
                  cuda_available: Optional[bool] = None) -> DeviceChoice:
    """The device ``auto`` means for ``workload``: CPU without CUDA; with CUDA the one the probe
    measured faster (CPU on a tie: it needs no transfers), remembered per machine."""
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
    if isinstance(known, dict) and known.get("device") in ("cpu", "cuda"):
        return DeviceChoice(**{k: known.get(k) for k in
                               ("workload", "device", "reason", "cpu_ms", "cuda_ms")})
    measure = probe or measure_workload
    cpu_ms = float(measure(workload, torch.device("cpu")))
    cuda_ms = float(measure(workload, torch.device("cuda")))
    device = "cuda" if cuda_ms < cpu_ms else "cpu"
    faster, slower = sorted((cpu_ms, cuda_ms))
    reason = (f"measured faster for {workload} work on this machine "
              f"(CPU {cpu_ms:.2f} ms, CUDA {cuda_ms:.2f} ms per probe, {slower / max(faster, 1e-9):.1f}x)")
    choice = DeviceChoice(workload, device, reason, cpu_ms, cuda_ms)
    cache.setdefault(key, {})[workload] = asdict(choice)
    _write_cache(cache)
    return choice
