"""A stronger, bond-aware Mutagenicity target GNN: the ``strong`` target of ``config.py``.

:class:`GINETarget` is a GIN with edge features (PyG ``GINEConv``):

* atom one-hot ``x`` -> linear embedding of width ``hidden``;
* ``num_layers`` x ``GINEConv``: ``h_i' = MLP((1 + eps) h_i + sum_j ReLU(h_j + W e_ji))``, an MLP of
  two linear layers with BatchNorm and ReLU; sum aggregation, no degree normalisation, so a node's
  embedding depends only on the edges that are kept (the premise of the paper's explanations);
* jumping-knowledge readout: every layer's node embeddings (the input embedding included) are
  sum- and max-pooled per graph, concatenated, and a 2-layer MLP head gives the logits.

Bond orders: ``edge_attr`` is the one-hot bond order (single / double / triple, ``[E, 3]``, one
row per directed edge, aligned with ``edge_index``). Internally the edge encoder sees 4 channels,
the 4th one an "unknown bond" flag. When ``edge_attr`` is None every edge is encoded as
``none_bond``: ``"unknown"`` (the learned unknown-bond embedding; used when the model was trained
with ``unknown_bond_prob > 0``, i.e. while training some graphs had all their bond orders hidden)
or ``"single"``. A graph whose edges were all deleted still gets its row of logits (pooling uses
``num_graphs``).

Eval mode is deterministic: dropout is off and BatchNorm uses its running statistics.

:func:`train_strong_target` trains it with Adam, checkpoint selection on validation accuracy
(ties: lower validation loss) and early stopping.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch
from torch_geometric.nn import GINEConv, global_add_pool, global_max_pool

from gem_core.runtime.device import deterministic_algorithms, resolve_device

CPU = torch.device("cpu")

BOND_CHANNELS = 3  # single, double, triple (Mutagenicity edge labels 0, 1, 2)

DEFAULT_RECIPE = dict(
    hidden=64,
    num_layers=4,
    dropout=0.2,
    lr=1e-3,
    weight_decay=0.0,
    batch_size=64,
    max_epochs=200,
    patience=50,
    schedule="plateau",
    unknown_bond_prob=0.1,
    drop_edge=0.0,
    ema=0.0,
)


def _mlp(d_in: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, d_out),
        nn.BatchNorm1d(d_out),
        nn.ReLU(),
        nn.Linear(d_out, d_out),
        nn.BatchNorm1d(d_out),
        nn.ReLU(),
    )


class GINETarget(nn.Module):
    """Graph classifier: atom embedding, ``GINEConv`` x ``num_layers``, sum+max JK readout, MLP head.

    ``forward(x, edge_index, batch=None, num_graphs=None, edge_attr=None)`` returns logits
    ``[num_graphs, num_classes]``. With ``num_classes=1`` it is a regressor: its one output is a
    value in the units of what it was trained on (the head's output times the buffer
    ``value_scale`` plus ``value_shift``, the training values' spread and mean, so the head
    learns standardised numbers whatever the units; both saved with the weights).
    """

    value_shift: Tensor  # a regressor's buffers (see the class docstring)
    value_scale: Tensor

    def __init__(
        self,
        in_channels: int = 14,
        num_classes: int = 2,
        hidden: int = 64,
        num_layers: int = 4,
        dropout: float = 0.2,
        none_bond: str = "unknown",
    ):
        super().__init__()
        if none_bond not in ("unknown", "single"):
            raise ValueError(f"none_bond must be 'unknown' or 'single', not {none_bond!r}")
        self.none_bond = none_bond
        self.atom = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(
            GINEConv(_mlp(hidden, hidden), train_eps=True, edge_dim=BOND_CHANNELS + 1)
            for _ in range(num_layers)
        )
        self.dropout = dropout
        readout = 2 * hidden * (num_layers + 1)
        self.head = nn.Sequential(
            nn.Linear(readout, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )
        #: one output, a value (fixed at construction: read on every forward)
        self._regression = num_classes == 1
        if self._regression:
            self.register_buffer("value_shift", torch.zeros(1))
            self.register_buffer("value_scale", torch.ones(1))

    @property
    def regression(self) -> bool:
        """Whether the model outputs one value (a regressor), not class logits."""
        return self._regression

    @torch.no_grad()
    def set_value_scale(self, values: Tensor) -> None:
        """Standardise a regressor's head on the training ``values`` (mean and spread)."""
        v = values.double().reshape(-1)
        spread = float(v.std()) if v.numel() > 1 else 1.0
        self.value_shift.fill_(float(v.mean()))
        self.value_scale.fill_(spread if spread > 1e-12 else 1.0)

    def encode_bonds(self, edge_index: Tensor, edge_attr: Optional[Tensor]) -> Tensor:
        """The 4-channel bond encoding ``[E, 4]`` (single, double, triple, unknown)."""
        num_edges = edge_index.size(1)
        if edge_attr is None:
            out = edge_index.new_zeros((num_edges, BOND_CHANNELS + 1), dtype=torch.float)
            out[:, BOND_CHANNELS if self.none_bond == "unknown" else 0] = 1.0
            return out
        if edge_attr.dim() == 1:  # bond-order class per edge (0 single, 1 double, 2 triple)
            edge_attr = F.one_hot(edge_attr.long(), BOND_CHANNELS)
        edge_attr = edge_attr.float()
        if edge_attr.size(1) == BOND_CHANNELS:
            edge_attr = torch.cat([edge_attr, edge_attr.new_zeros(num_edges, 1)], dim=1)
        return edge_attr

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        edge_attr: Optional[Tensor] = None,
    ) -> Tensor:
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        size = (
            num_graphs if num_graphs is not None else int(batch.max()) + 1 if batch.numel() else 1
        )
        e = self.encode_bonds(edge_index, edge_attr)
        h = self.atom(x.float())
        pooled = [global_add_pool(h, batch, size=size), global_max_pool(h, batch, size=size)]
        for conv in self.convs:
            h = conv(h, edge_index, e)
            pooled += [global_add_pool(h, batch, size=size), global_max_pool(h, batch, size=size)]
        out = self.head(F.dropout(torch.cat(pooled, dim=-1), self.dropout, self.training))
        if self.regression:
            return out * self.value_scale + self.value_shift
        return out


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- training


def _batches(
    graphs: list,
    idx: Tensor,
    batch_size: int,
    gen: Optional[torch.Generator] = None,
    device: torch.device = CPU,
):
    """Batches of ``graphs[idx]`` on ``device`` (shuffled with ``gen`` when given, on the CPU)."""
    order = idx[torch.randperm(len(idx), generator=gen)] if gen is not None else idx
    for s in range(0, len(order), batch_size):
        yield Batch.from_data_list([graphs[int(i)] for i in order[s : s + batch_size]]).to(device)


def _augment(b: Batch, gen: torch.Generator, unknown_bond_prob: float, drop_edge: float):
    """Training-time augmentation: hide all bond orders of some graphs; drop random bonds."""
    edge_index, edge_attr = b.edge_index, b.edge_attr.float()
    # the draws come from ``gen`` on the CPU (the same draws on every device), then move over
    if unknown_bond_prob > 0:
        hide = (torch.rand(b.num_graphs, generator=gen) < unknown_bond_prob).to(edge_index.device)
        hide_e = hide[b.batch[edge_index[0]]]
        attr = torch.cat([edge_attr, edge_attr.new_zeros(edge_attr.size(0), 1)], dim=1)
        attr[hide_e] = attr.new_tensor([0.0, 0.0, 0.0, 1.0])
        edge_attr = attr
    if drop_edge > 0:
        # drop undirected bonds: decide on the (lo, hi) pair so both directions go together
        lo = torch.minimum(edge_index[0], edge_index[1])
        hi = torch.maximum(edge_index[0], edge_index[1])
        key = lo * b.num_nodes + hi
        uniq, inv = torch.unique(key, return_inverse=True)
        keep = (torch.rand(uniq.numel(), generator=gen) >= drop_edge).to(inv.device)[inv]
        edge_index, edge_attr = edge_index[:, keep], edge_attr[keep]
    return edge_index, edge_attr


@torch.no_grad()
def _ema_update(ema: nn.Module, model: nn.Module, decay: float) -> None:
    src = model.state_dict()
    for k, v in ema.state_dict().items():
        if v.is_floating_point():
            v.lerp_(src[k], 1.0 - decay)
        else:
            v.copy_(src[k])


@torch.no_grad()
def evaluate(model: nn.Module, batches: list, edge_attr: bool = True) -> tuple[float, float]:
    """Over pre-built batches (eval mode): accuracy and mean cross-entropy of a classifier;
    R² and the mean squared error in standardised units of a regressor (the score a
    checkpoint is chosen by, higher is better, then the loss)."""
    model.eval()
    regression = bool(getattr(model, "regression", False))
    correct, loss, n = 0, 0.0, 0
    outs, ys = [], []
    for b in batches:
        out = model(
            b.x, b.edge_index, b.batch, b.num_graphs, edge_attr=b.edge_attr if edge_attr else None
        )
        if regression:
            outs.append(out[:, 0].double())
            ys.append(b.y.double())
        else:
            loss += float(F.cross_entropy(out, b.y, reduction="sum"))
            correct += int((out.argmax(-1) == b.y).sum())
        n += b.num_graphs
    if regression:
        if not outs:
            return 0.0, float("inf")
        pred, y = torch.cat(outs), torch.cat(ys)
        return r_squared(pred, y), float(
            ((pred - y) ** 2).mean() / float(model.get_buffer("value_scale")) ** 2
        )
    return correct / max(n, 1), loss / max(n, 1)


def r_squared(pred: Tensor, y: Tensor) -> float:
    """The coefficient of determination of ``pred`` against ``y`` (1 - SSE / SST; 0 when
    ``y`` is constant)."""
    y, pred = y.double().reshape(-1), pred.double().reshape(-1)
    sst = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - pred) ** 2).sum()) / sst if sst > 0 else 0.0


def train_strong_target(
    ds,
    seed: int = 0,
    report_test: bool = True,
    verbose: bool = False,
    device: Union[str, torch.device, None] = "cpu",
    stop: Optional[Callable[[], Optional[str]]] = None,
    on_epoch: Optional[Callable[[int, int, float], None]] = None,
    **recipe,
) -> tuple[GINETarget, dict]:
    """Train a :class:`GINETarget` on ``ds`` (Mutagenicity) with its seeded split, on ``device``.

    Recipe keys (defaults in :data:`DEFAULT_RECIPE`): ``hidden``, ``num_layers``, ``dropout``,
    ``lr``, ``weight_decay``, ``batch_size``, ``max_epochs``, ``patience`` (epochs without a better
    validation checkpoint before stopping), ``schedule`` (``"plateau"``: halve the lr after 15
    epochs without a lower validation loss; ``"cosine"``: cosine decay over ``max_epochs``;
    ``"none"``), ``unknown_bond_prob`` (training graphs whose bond orders are all hidden, teaching
    the "unknown bond" embedding used when ``edge_attr`` is None; 0 -> None means single bonds),
    ``drop_edge`` (fraction of bonds dropped at random from training graphs), ``ema`` (when
    > 0, the decay per optimiser step of an exponential moving average of the weights and the
    BatchNorm statistics; the averaged model is the one validated and kept).

    The kept checkpoint is the one with the best validation accuracy (ties: lower validation
    loss). Test accuracy is computed only when ``report_test``. A dataset whose row is a
    regression (``spec.regression``) trains a one-output regressor on the squared error; its
    "accuracy" figures are then R² (:func:`evaluate`).

    ``stop()``, asked after every epoch, ends training early when it returns a reason (a time
    budget spent, a user's cancel; the metrics' ``stopped`` says which, else
    ``"early stopping"`` or ``"epochs"``); ``on_epoch(epoch, max_epochs, val_accuracy)``
    reports progress.

    ``device``: where the model and the batches live while training (``auto``: CUDA when
    present); the random draws (shuffling, augmentation) stay on the CPU generator, so they are
    the same on every device.

    Returns:
        the model (CPU, eval mode) and a metrics dict.
    """
    dev = resolve_device(device)
    with deterministic_algorithms(dev):
        return _train(ds, seed, report_test, verbose, dev, recipe, stop, on_epoch)


def _train(
    ds,
    seed: int,
    report_test: bool,
    verbose: bool,
    dev: torch.device,
    recipe: dict,
    stop: Optional[Callable[[], Optional[str]]] = None,
    on_epoch: Optional[Callable[[int, int, float], None]] = None,
) -> tuple[GINETarget, dict]:
    """The body of :func:`train_strong_target` on a resolved device."""
    unknown = set(recipe) - set(DEFAULT_RECIPE)
    if unknown:
        raise TypeError(f"unknown recipe keys: {sorted(unknown)}")
    r = {**DEFAULT_RECIPE, **recipe}
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    regression = bool(getattr(ds.spec, "regression", False))
    model = GINETarget(
        ds.num_features,
        1 if regression else ds.num_classes,
        r["hidden"],
        r["num_layers"],
        r["dropout"],
        none_bond="unknown" if r["unknown_bond_prob"] > 0 else "single",
    ).to(dev)
    graphs = ds.graphs
    if regression:
        model.set_value_scale(torch.cat([graphs[int(i)].y.view(-1) for i in ds.split.train]))
    opt = torch.optim.Adam(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    sched: Optional[torch.optim.lr_scheduler.LRScheduler]
    if r["schedule"] == "plateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, mode="min", factor=0.5, patience=15, min_lr=1e-5
        )
    elif r["schedule"] == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=r["max_epochs"], eta_min=1e-5)
    elif r["schedule"] == "none":
        sched = None
    else:
        raise ValueError(f"unknown schedule {r['schedule']!r}")
    fixed = {
        name: list(_batches(graphs, ds.split[name], 512, device=dev))
        for name in ("train", "val", "test")
    }
    best, best_state, best_epoch, since_best, epoch = (-float("inf"), float("inf")), None, 0, 0, 0
    history = []
    ema = copy.deepcopy(model) if r["ema"] > 0 else None
    start = time.perf_counter()
    stopped = "epochs"
    for epoch in range(1, r["max_epochs"] + 1):
        model.train()
        total, n = 0.0, 0
        for b in _batches(graphs, ds.split.train, r["batch_size"], gen, dev):
            if b.num_graphs < 2:  # BatchNorm needs more than one row
                continue
            ei, ea = _augment(b, gen, r["unknown_bond_prob"], r["drop_edge"])
            opt.zero_grad()
            out = model(b.x, ei, b.batch, b.num_graphs, edge_attr=ea)
            if regression:  # the squared error in standardised units
                loss = F.mse_loss(out[:, 0] / model.value_scale, b.y.float() / model.value_scale)
            else:
                loss = F.cross_entropy(out, b.y)
            loss.backward()
            opt.step()
            if ema is not None:
                _ema_update(ema, model, r["ema"])
            total += float(loss.detach()) * b.num_graphs
            n += b.num_graphs
        kept = ema if ema is not None else model
        val_acc, val_loss = evaluate(kept, fixed["val"])
        history.append((epoch, total / max(n, 1), val_acc, val_loss))
        if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau):  # schedule "plateau"
            sched.step(val_loss)
        elif sched is not None:
            sched.step()
        if (val_acc, -val_loss) > (best[0], -best[1]):
            best, best_epoch, since_best = (val_acc, val_loss), epoch, 0
            best_state = copy.deepcopy(kept.state_dict())
        else:
            since_best += 1
        if verbose:
            print(
                f"  epoch {epoch:3d} train loss {total / max(n, 1):.4f} val acc {val_acc:.4f} "
                f"val loss {val_loss:.4f} lr {opt.param_groups[0]['lr']:.1e}",
                flush=True,
            )
        if on_epoch is not None:
            on_epoch(epoch, r["max_epochs"], val_acc)
        if since_best >= r["patience"]:
            stopped = "early stopping"
            break
        reason = stop() if stop is not None else None
        if reason:
            stopped = reason
            break
    seconds = time.perf_counter() - start
    assert best_state is not None  # the first epoch's score beats the initial -inf
    model.load_state_dict(best_state)
    model.eval()
    metrics: dict[str, Any] = {
        "seed": seed,
        "train_accuracy": evaluate(model, fixed["train"])[0],
        "val_accuracy": best[0],
        "val_loss": best[1],
        "val_accuracy_no_bonds": evaluate(model, fixed["val"], edge_attr=False)[0],
        "best_epoch": best_epoch,
        "epochs": epoch,
        "train_seconds": seconds,
        "stopped": stopped,
        "parameters": count_parameters(model),
    }
    if report_test:
        metrics["test_accuracy"] = evaluate(model, fixed["test"])[0]
        metrics["test_accuracy_no_bonds"] = evaluate(model, fixed["test"], edge_attr=False)[0]
    metrics["history"] = history
    return model.cpu(), metrics
