"""A pack's arithmetic, kernel for kernel, as each instance's alone (CPU).

Packing instances into one disjoint graph changes nothing mathematically, but a few CPU kernels
choose their code path by tensor shape, so a value in a pack can differ in the last bit from the
same value computed on the instance alone:

* PyTorch's vectorised ``sigmoid`` rounds differently from the scalar loop it runs on the last
  ``numel % block`` elements of a contiguous tensor (``block``: two vector registers, 32 floats
  with AVX-512). Alone, an instance's last mask entries take the scalar loop; in a pack most of
  them are vectorised.
* A linear layer on 1-3 rows runs as a matrix-vector product or a small-matrix kernel whose sums
  are ordered differently from the rows of a taller product (forward and backward), and which
  also rounds by the memory alignment of its rows. A graph classifier's head sees one row per
  graph alone, one row per instance of the pack.
* MKL splits a tall product's rows between threads, and the rows near a split round differently.

Over GNNExplainer's 100 Adam steps such last-bit differences can grow into a different top-K.
:class:`PackAsAlone` removes them: every sigmoid of a mask is computed both ways and each element
keeps the way its instance alone takes (:func:`sigmoid_as_alone`), and the rows of instances whose
row count rounds differently are recomputed, each instance by its own product from an aligned
copy, in the forward and the backward pass (:class:`_RowsAlone`), and the pack runs on one
intra-op thread. Which elements are scalar and which row counts round
differently is measured on this machine's kernels at first use (:func:`sigmoid_block`,
:func:`linear_rounding`), not assumed. The other kernels the optimisation runs (message
aggregation in edge order, pooling, normalisation, ReLU, cross-entropy per row, Adam's
element-wise steps) compute each element or row the same way in any shape on this machine.

One case stays out of reach: a linear layer whose product rounds a row by its *position* in a
tall matrix (the input gradient of BA-shapes' 10 -> 20 first layer: MKL blocks the rows, and the
last block of an instance alone is not a last block in the pack). Matching it would take one
product per instance and layer; :func:`packs_exactly` says whether a model has such a layer, and
there a pack agrees with PyG up to float32 rounding (BA-shapes: 33 of 35 test nodes bit for bit,
the others within 6e-8). Off the CPU (CUDA) nothing is changed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: PyTorch's parallel grain (``at::internal::GRAIN_SIZE``): a contiguous element-wise call on more
#: elements may be split across threads, each part with a scalar remainder of its own
_GRAIN = 32768
#: row counts probed for a linear layer's shape-dependent rounding
_PROBE_ROWS = 16


def _scalar_layout(x: Tensor) -> Tensor:
    """A copy of 1-D ``x`` with stride 2: PyTorch's element-wise loops run their scalar code on
    it (they vectorise contiguous operands only)."""
    return torch.stack([x, x], dim=1)[:, 0]


class _OneThread:
    """Run a block on one intra-op thread (and restore the count): MKL splits a tall product's
    rows between threads, and where a split falls changes how those rows round."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        if self.threads != 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc) -> None:
        if self.threads != 1:
            torch.set_num_threads(self.threads)


@functools.lru_cache(maxsize=None)
def sigmoid_block() -> int:
    """Elements PyTorch's CPU sigmoid vectorises per step: on a contiguous tensor of ``n``
    elements, the first ``n // block * block`` take the vectorised code, the rest the scalar
    loop. 1 when both codes round alike here (nothing to correct); 0 when the pattern is
    unknown (a pack then rounds as it may).

    Measured on values whose two codes differ: for each length 1..300 the call is compared with
    both codes, and the block is the one power of two that explains every length."""
    with _OneThread():
        return _sigmoid_block()


def _sigmoid_block() -> int:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(_GRAIN, generator=gen)
    vec, sca = x.sigmoid(), _scalar_layout(x).sigmoid()
    apart = vec != sca
    if not bool(apart.any()):
        return 1
    if int(apart.sum()) < 300:
        return 0
    probe, v, s = x[apart][:300], vec[apart][:300], sca[apart][:300]
    calls = [probe[:n].sigmoid() for n in range(1, 301)]
    for block in (2**k for k in range(1, 9)):
        if all(
            torch.equal(r, torch.cat([v[: n - n % block], s[n - n % block : n]]))
            for n, r in enumerate(calls, start=1)
        ):
            return block
    return 0


def tail_mask(lengths: Tensor, block: int) -> Tensor:
    """``bool [sum(lengths)]``: the elements of each consecutive segment past its last full
    ``block`` (those a call on the segment alone computes with the scalar loop)."""
    lengths = lengths.to("cpu", torch.long)
    starts = torch.cumsum(lengths, 0) - lengths
    pos = torch.arange(int(lengths.sum())) - torch.repeat_interleave(starts, lengths)
    return pos >= torch.repeat_interleave(lengths - lengths % block, lengths)


def sigmoid_as_alone(x: Tensor, tail: Optional[Tensor], block: int) -> Tensor:
    """``x.sigmoid()`` of 1-D ``x`` whose segments are separate instances, each element computed
    by the code a sigmoid of its segment alone runs: vectorised for the segment's full blocks,
    scalar for its ``tail``. Differentiable (both codes share the gradient formula)."""
    if block <= 1 or tail is None:
        return x.sigmoid()
    n = x.numel()
    padded = F.pad(x, (0, (-n) % block))  # no remainder, so every element is vectorised
    vec = torch.cat([part.sigmoid() for part in padded.split(_GRAIN)])[:n]
    if not bool(tail.any()):
        return vec
    return torch.where(tail.to(x.device), _scalar_layout(x).sigmoid(), vec)


@dataclass(frozen=True)
class LinearRounding:
    """How a linear layer of one shape rounds ``m`` rows, forward and input gradient, against
    the same rows inside a taller input, on this CPU (see :func:`linear_rounding`).

    Attributes:
        sizes: the row counts ``m <= 16`` that can round apart (typically 1-3: a matrix-vector
            product or a small-matrix kernel).
        exact: whether taller row counts (17-48) never do. Some shapes' products block their
            rows so that a row's rounding depends on its position (seen for the input gradient
            of a 10 -> 20 layer); a pack cannot match those.
        by_alignment: the sizes whose rounding also depends on where their rows lie in memory
            (a small-matrix kernel reading unaligned rows).
    """

    sizes: frozenset
    exact: bool
    by_alignment: frozenset


@functools.lru_cache(maxsize=None)
def _linear_rounding(shape: tuple, has_bias: bool, dtype: torch.dtype) -> LinearRounding:
    with _OneThread():
        return _probe_linear(shape, has_bias, dtype)


def _probe_linear(shape: tuple, has_bias: bool, dtype: torch.dtype) -> LinearRounding:
    gen = torch.Generator().manual_seed(0)
    out_f, in_f = shape
    w = torch.randn(out_f, in_f, generator=gen, dtype=dtype)
    b = torch.randn(out_f, generator=gen, dtype=dtype) if has_bias else None
    x = torch.randn(6 * _PROBE_ROWS, in_f, generator=gen, dtype=dtype)
    g = torch.randn(6 * _PROBE_ROWS, out_f, generator=gen, dtype=dtype)
    tall, tall_grad = F.linear(x, w, b), g.mm(w)

    def apart(m: int, at: int) -> bool:
        rows = slice(at, at + m)
        return not (
            torch.equal(F.linear(x[rows].clone(), w, b), tall[rows])
            and torch.equal(g[rows].clone().mm(w), tall_grad[rows])
        )

    def moved(values: Tensor, offset: int) -> Tensor:  # the same rows, ``offset`` floats on
        buf = torch.empty(values.numel() + 16, dtype=dtype)
        return buf[offset : offset + values.numel()].view_as(values).copy_(values)

    def by_alignment(m: int) -> bool:
        alone, alone_grad = F.linear(x[:m].clone(), w, b), g[:m].clone().mm(w)
        return any(
            not (
                torch.equal(F.linear(moved(x[:m], off), w, b), alone)
                and torch.equal(moved(g[:m], off).mm(w), alone_grad)
            )
            for off in range(1, 16)
        )

    sizes = frozenset(
        m for m in range(1, _PROBE_ROWS + 1) if any(apart(m, at) for at in range(_PROBE_ROWS))
    )
    taller = any(
        apart(m, at)
        for m in range(_PROBE_ROWS + 1, 3 * _PROBE_ROWS + 1)
        for at in range(_PROBE_ROWS)
    )
    return LinearRounding(sizes, not taller, frozenset(m for m in sizes if by_alignment(m)))


def linear_rounding(layer: nn.Module) -> LinearRounding:
    """How ``layer`` (a linear layer) rounds rows on this CPU with its shape, on one thread (as
    packs run): measured once per shape at 16 row offsets and 15 memory offsets (a few
    milliseconds), then cached."""
    weight = layer.weight
    assert isinstance(weight, Tensor)  # the layer's weight parameter (nn.Linear's, PyG's Linear's)
    return _linear_rounding(tuple(weight.shape), layer.bias is not None, weight.dtype)


class _RowsAlone(torch.autograd.Function):
    """Rows of ``F.linear(x, weight, bias)``, each span of rows as its own product, and in the
    backward pass each span's input gradient as its own product (autograd's ``grad @ W``).

    Where the span sizes round by alignment, each span is first copied to a 64-byte-aligned
    slot of ``_SLOT`` rows, as an instance's own tensor is aligned alone (PyTorch allocates on
    64 bytes). ``plan``: :class:`_Spans`."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Optional[Tensor], plan: "_Spans") -> Tensor:
        ctx.save_for_backward(weight)
        ctx.shape, ctx.plan = x.shape, plan
        if plan.aligned:
            parts = _slot_parts(x.index_select(0, plan.gather.to(x.device)), plan.lengths)
        else:
            rows = x if plan.index is None else x.index_select(0, plan.index.to(x.device))
            parts = rows.split(plan.lengths)
        return torch.cat([F.linear(part, weight, bias) for part in parts])

    @staticmethod
    def backward(ctx, grad: Tensor):
        (weight,) = ctx.saved_tensors
        plan = ctx.plan
        if plan.aligned:
            slots = grad.new_zeros(len(plan.lengths) * _SLOT, grad.size(1))
            slots.index_copy_(0, plan.slot_rows.to(grad.device), grad)
            parts = _slot_parts(slots, plan.lengths)
        else:
            parts = grad.split(plan.lengths)
        rows = torch.cat([part.mm(weight) for part in parts])
        if plan.index is None:
            return rows, None, None, None
        grad_x = grad.new_zeros(ctx.shape).index_copy_(0, plan.index.to(grad.device), rows)
        return grad_x, None, None, None


#: rows of one span's aligned slot (at least the largest row count probed)
_SLOT = _PROBE_ROWS


def _slot_parts(slots: Tensor, lengths: tuple) -> list:
    """The span in each ``_SLOT``-row slot of ``slots`` (its first ``lengths[k]`` rows)."""
    if len(set(lengths)) == 1:  # one strided view, cut in one call (a graph head: all 1)
        return list(slots.view(len(lengths), _SLOT, -1)[:, : lengths[0]].unbind(0))
    return [slot[:n] for slot, n in zip(slots.split(_SLOT), lengths)]


@dataclass(frozen=True)
class _Spans:
    """The rows of a layer's input that :class:`_RowsAlone` computes span by span.

    Attributes:
        lengths: rows of each span (each at most ``_SLOT``).
        aligned: whether the spans go through aligned slots (some size rounds by alignment).
        gather: ``[len(lengths) * _SLOT]`` input row of each slot row (a span's own rows, then
            its first row again as padding).
        slot_rows: slot row of each span row, in order.
        index: input row of each span row, in order; None when the spans are all the rows.
    """

    lengths: tuple
    aligned: bool
    gather: Tensor
    slot_rows: Tensor
    index: Optional[Tensor]

    @classmethod
    def of(cls, spans: list, rows: int, aligned: bool) -> "_Spans":
        lengths = tuple(b - a for a, b in spans)
        gather = torch.tensor([a + (j if j < b - a else 0) for a, b in spans for j in range(_SLOT)])
        slot_rows = torch.tensor([k * _SLOT + j for k, n in enumerate(lengths) for j in range(n)])
        index = None
        if sum(lengths) < rows:
            index = torch.cat([torch.arange(a, b) for a, b in spans])
        return cls(lengths, aligned, gather, slot_rows, index)


def _is_linear(module: nn.Module) -> bool:
    from torch_geometric.nn.dense.linear import Linear

    return isinstance(module, (nn.Linear, Linear))


def packs_exactly(model: nn.Module, device: torch.device) -> bool:
    """Whether :class:`PackAsAlone` matches, on ``device``, every kernel of ``model`` it knows to
    round by shape: the CPU, the sigmoid's code paths known, and no linear layer that rounds a
    row by its position in a tall input."""
    return (
        torch.device(device).type == "cpu"
        and sigmoid_block() > 0
        and all(linear_rounding(m).exact for m in model.modules() if _is_linear(m))
    )


class PackAsAlone:
    """For the lifetime of one packed optimisation of ``model`` (a ``with`` block): its linear
    layers give each instance's rows as computed alone, :meth:`mask_layers` / :meth:`sigmoid`
    give mask sigmoids as computed alone, and the block runs on one intra-op thread (a tall
    product split between threads rounds the rows near the split differently; PyG's products of
    one instance's few rows run on one thread). A no-op off the CPU.

    Args:
        model: the explained model (hooks are added to its linear layers until :meth:`close`).
        rows_per_level: for each row count a layer can see (nodes of the pack, graphs, directed
            edges), the rows of each instance at that level; where two levels have the same
            count, the first given wins.
        edge_lengths: directed edges of each instance (the mask's segments).
        device: where the pack runs (anything but the CPU: nothing is changed).
    """

    def __init__(
        self,
        model: nn.Module,
        rows_per_level: list[Tensor],
        edge_lengths: Tensor,
        device: torch.device,
    ):
        self.model = model
        self.active = device.type == "cpu"
        self.block = sigmoid_block() if self.active else 0
        self.edge_tail = self.tail(edge_lengths)
        self._levels: dict[int, Tensor] = {}
        for sizes in rows_per_level:
            self._levels.setdefault(int(sizes.sum()), sizes.to("cpu", torch.long))
        self._spans: dict[tuple, Optional[_Spans]] = {}
        self._hooks: list = []
        self._threads = _OneThread()
        # each linear layer's rounding, probed once per shape; a hook on each
        self._rounding = (
            {m: linear_rounding(m) for m in model.modules() if _is_linear(m)} if self.active else {}
        )
        self._hooks += [m.register_forward_hook(self._linear_hook) for m in self._rounding]

    def _spans_of(self, rows: int, rounding: LinearRounding) -> Optional[_Spans]:
        """The instances whose row count at the level of ``rows`` rounds apart (None: none)."""
        key = (rows, rounding)
        apart = rounding.sizes
        if key not in self._spans:
            sizes = self._levels.get(rows)
            spans = []
            if sizes is not None and apart:
                ends = torch.cumsum(sizes, 0).tolist()
                spans = [(e - n, e) for n, e in zip(sizes.tolist(), ends) if n in apart]
            aligned = any(b - a in rounding.by_alignment for a, b in spans)
            self._spans[key] = _Spans.of(spans, rows, aligned) if spans else None
        return self._spans[key]

    def _linear_hook(self, module: nn.Module, args: tuple, out: Tensor) -> Tensor:
        x = args[0]
        if not isinstance(x, Tensor) or x.dim() != 2:
            return out
        plan = self._spans_of(x.size(0), self._rounding[module])
        if plan is None:
            return out
        rows = _RowsAlone.apply(x, module.weight, module.bias, plan)
        if plan.index is None:
            return rows
        return out.index_copy(0, plan.index.to(out.device), rows)

    def mask_layers(self, mask: Tensor, edge_index: Tensor) -> None:
        """PyG's ``set_masks(model, mask, edge_index, apply_sigmoid=True)``, with each layer's
        sigmoid of the mask computed as each instance alone (one sigmoid per layer and forward
        pass, as PyG's layers do, so autograd sums the same terms in the same order)."""
        from torch_geometric.explain.algorithm.utils import set_masks
        from torch_geometric.nn import MessagePassing

        from gem_core.explainers._packed import release_masks

        release_masks(self.model)  # a mask slot left as a Parameter would refuse plain tensors
        if self.block <= 1:
            set_masks(self.model, mask, edge_index, apply_sigmoid=True)
            return
        set_masks(self.model, mask.detach(), edge_index, apply_sigmoid=False)

        def sigmoid_before(layer: nn.Module, _args: tuple) -> None:
            layer._edge_mask = sigmoid_as_alone(mask, self.edge_tail, self.block)

        self._hooks += [
            m.register_forward_pre_hook(sigmoid_before)
            for m in self.model.modules()
            if isinstance(m, MessagePassing) and m.explain
        ]

    def tail(self, lengths: Tensor) -> Optional[Tensor]:
        """The scalar-code elements of 1-D values made of one segment per instance of
        ``lengths`` (for :meth:`sigmoid`; computed once, used every step)."""
        return tail_mask(lengths, self.block) if self.block > 1 else None

    def sigmoid(self, values: Tensor, tail: Optional[Tensor] = None) -> Tensor:
        """Sigmoid of 1-D ``values`` made of one segment per instance (their :meth:`tail`;
        default: the mask's segments), each element as a sigmoid of its segment alone computes
        it."""
        if self.block <= 1:
            return values.sigmoid()
        return sigmoid_as_alone(values, self.edge_tail if tail is None else tail, self.block)

    def close(self) -> None:
        """Remove the hooks and the masks (the model is as before)."""
        from gem_core.explainers._packed import release_masks

        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        release_masks(self.model)

    def __enter__(self) -> "PackAsAlone":
        if self.active:  # as PyG's per-instance products of a few rows run
            self._threads.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        finally:
            if self.active:
                self._threads.__exit__(*exc)
