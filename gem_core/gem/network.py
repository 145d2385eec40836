"""Gem's network: a GCN encoder with μ / log σ heads and an edge-wise pair decoder (paper §3.2).

Model (paper Appendix B, Kipf & Welling's VGAE): a GCN encoder with output widths 32, 32, 16
whose last layer has two heads, μ and log σ; during training ``z = μ + σ·ε``, at inference
``z = μ``. The inner-product decoder ``σ(z_u · z_v)`` is read only on the instance's existing
pairs (edge-wise, O(|E|); the dense ``σ(Z Zᵀ)`` is never built). An optional learnable offset
``b`` (``σ(z_u · z_v + b)``) and an optional symmetric MLP on ``[z_u * z_v, |z_u - z_v|]`` are
described in :mod:`gem_core.gem.autoencoder`.

Speed: the GCN normalisation ``D^-1/2 (A+I) D^-1/2`` is built once per batch as a CSR matrix
shared by all layers (:func:`normalized_adjacency`), and each layer is one fused sparse-dense
``addmm``. The one-hot label block is never materialised: the first layer's linear map of a
one-hot row is a row lookup in its weight (exactly what ``GCNConv`` computes on the dense input).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from gem_core.gem.settings import Decoder

MAX_LOGSTD = 10.0
DECODERS: tuple[str, ...] = Decoder.values()


def normalized_adjacency(
    pairs: Tensor, num_nodes: int, device: Union[str, torch.device, None] = None
) -> Tensor:
    """``D^-1/2 (A + I) D^-1/2`` of an undirected graph as a sparse CSR tensor (GCN propagation).

    Built on the CPU (a stable NumPy sort by (row, column), fast on the nearly sorted keys of
    packed pairs) and moved to ``device``. Each row holds its columns in increasing order, so a
    node's neighbour sum runs in the same order however many instances are packed together.
    """
    n = int(num_nodes)
    p = pairs.detach().cpu().numpy().astype(np.int64, copy=False).reshape(2, -1)
    loops = np.arange(n, dtype=np.int64)
    row = np.concatenate([p[0], p[1], loops])
    col = np.concatenate([p[1], p[0], loops])
    order = np.argsort(row * max(n, 1) + col, kind="stable")
    col = col[order]
    counts = np.bincount(row, minlength=n)
    dinv = (1.0 / np.sqrt(np.maximum(counts, 1))).astype(np.float32)  # 1 (self-loop) + degree
    val = np.repeat(dinv, counts) * dinv[col]  # rows in order: row r's entries are counts[r]
    crow = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=crow[1:])
    with warnings.catch_warnings():  # "sparse CSR support is in beta" / invariant-check notices
        warnings.simplefilter("ignore", UserWarning)
        adj = torch.sparse_csr_tensor(
            torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val), size=(n, n)
        )
    return adj if device is None else adj.to(device)


def propagate(adj: Tensor, h: Tensor, bias: Optional[Tensor]) -> Tensor:
    """``Â @ H + b`` for a sparse ``Â`` in one fused ``addmm`` (no gradient tracked)."""
    if bias is None:
        return torch.sparse.mm(adj, h)
    return torch.addmm(bias.expand(h.size(0), -1), adj, h)


class _Propagate(torch.autograd.Function):
    """``Â @ H + b`` for a symmetric sparse ``Â`` in one fused ``addmm``.

    The backward pass is ``Â @ grad`` for ``H`` (``Â`` is symmetric: no transpose, which
    ``torch.sparse.mm``'s own backward would rebuild at every call) and ``Σ grad`` for ``b``.
    """

    @staticmethod
    def forward(ctx, adj: Tensor, h: Tensor, bias: Optional[Tensor]) -> Tensor:
        ctx.adj = adj
        ctx.has_bias = bias is not None
        return propagate(adj, h, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad_h = torch.sparse.mm(ctx.adj, grad) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return None, grad_h, grad_b


class SymGCNConv(GCNConv):
    """PyG ``GCNConv`` fed a precomputed symmetric normalised adjacency (CSR, self-loops included).

    Same parameters (``lin``, ``bias``) and the same maths as ``GCNConv(normalize=True)`` on the
    edge index, ``Â (H W) + b``; the normalisation is computed once per batch for all layers and
    propagation plus bias is one fused sparse-dense product each way.
    """

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(in_channels, out_channels, normalize=False, add_self_loops=False)

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        return self.propagate_linear(self.lin(x), adj)

    def propagate_linear(self, h: Tensor, adj: Tensor) -> Tensor:
        """``Â h + b`` for already transformed features ``h = x W`` (without a gradient to
        track, the product itself: an autograd function's call costs as much as a small one)."""
        if torch.is_grad_enabled():
            return _Propagate.apply(adj, h, self.bias)
        return propagate(adj, h, self.bias)


class GemNet(nn.Module):
    """GCN encoder (widths ``hidden``; last layer split into μ and log σ heads) + inner-product decoder.

    Args:
        label_dim: width of the one-hot / multi-hot label block.
        feat_dim: width of the original node features.
        hidden: output widths of the GCN layers; the last is the latent width of μ and log σ.
        decoder_bias: add one learnable scalar ``b`` to the decoder, ``σ(z_u · z_v + b)``.
        decoder: ``"inner"`` or ``"mlp"`` (see :class:`GemAutoEncoder`).
        edge_dim: width of per-pair features the ``"mlp"`` decoder also reads (0: none).
    """

    def __init__(
        self,
        label_dim: int,
        feat_dim: int,
        hidden: Sequence[int] = (32, 32, 16),
        decoder_bias: bool = False,
        decoder: str = "inner",
        edge_dim: int = 0,
    ):
        super().__init__()
        if len(hidden) < 2:
            raise ValueError("need at least two GCN layers (one hidden, one latent)")
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder!r}: use one of {', '.join(DECODERS)}")
        self.decoder_bias = nn.Parameter(torch.zeros(1)) if decoder_bias else None
        latent = int(hidden[-1])
        # "mlp": a symmetric pair scorer on [z_u * z_v, |z_u - z_v| (, e_uv)], added to the
        # inner product
        self.edge_dim = int(edge_dim)
        width = 2 * latent + self.edge_dim
        self.edge_mlp = (
            nn.Sequential(
                nn.Linear(width, 2 * latent), nn.ReLU(inplace=True), nn.Linear(2 * latent, 1)
            )
            if decoder == "mlp"
            else None
        )
        self.label_dim, self.feat_dim = int(label_dim), int(feat_dim)
        dims = [self.label_dim + self.feat_dim] + [int(h) for h in hidden[:-1]]
        # Normalisation is computed once per batch (normalized_adjacency), shared by all layers.
        self.convs = nn.ModuleList(SymGCNConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.conv_mu = SymGCNConv(dims[-1], int(hidden[-1]))
        self.conv_logstd = SymGCNConv(dims[-1], int(hidden[-1]))

    def _first_layer(self, cols: Tensor, x: Tensor, adj: Tensor) -> Tensor:
        conv = self.convs[0]
        assert isinstance(conv, SymGCNConv)  # __init__ builds the layers
        weight_t = conv.lin.weight.t()  # [label_dim + feat_dim, out]
        # one-hot label rows times the weight = a sum of row lookups (one per active column)
        h = F.embedding_bag(cols, weight_t[: self.label_dim].contiguous(), mode="sum")
        h = torch.addmm(h, x, weight_t[self.label_dim :])
        return conv.propagate_linear(h, adj)

    def encode(self, cols: Tensor, x: Tensor, adj: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """μ (and log σ while training) of every node."""
        h = F.relu(self._first_layer(cols, x, adj), inplace=True)
        for conv in itertools.islice(self.convs, 1, None):  # a slice would build a ModuleList
            h = F.relu(conv(h, adj), inplace=True)
        mu = self.conv_mu(h, adj)
        if not self.training:
            return mu, None
        return mu, self.conv_logstd(h, adj).clamp(max=MAX_LOGSTD)

    def decode(self, z: Tensor, pairs: Tensor, edge_attr: Optional[Tensor] = None) -> Tensor:
        """σ(z_u · z_v [+ MLP] [+ b]) on the given pairs only."""
        zu, zv = z.index_select(0, pairs[0]), z.index_select(0, pairs[1])
        prod = zu * zv
        logits = prod.sum(dim=-1)
        if self.edge_mlp is not None:
            parts = [prod, (zu - zv).abs()]
            if self.edge_dim:
                assert edge_attr is not None, "the decoder reads per-pair features: pass edge_attr"
                parts.append(edge_attr)
            logits = logits + self.edge_mlp(torch.cat(parts, dim=-1)).squeeze(-1)
        if self.decoder_bias is not None:
            logits = logits + self.decoder_bias
        return torch.sigmoid(logits)
