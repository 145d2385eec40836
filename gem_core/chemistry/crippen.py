"""Crippen logP on real molecules: a regression task whose explanation ground truth is known.

Wildman–Crippen logP (RDKit's ``Crippen`` module) is a sum of per-atom contributions, each set by
the atom's type (its element, neighbours, bond orders and hydrogens). A GNN that regresses logP
with sum pooling therefore has an exact additive ground truth: the contribution of every atom
(``atom_contrib``) and, per bond, the summed contributions of its two atoms
(:func:`bond_contributions`). Explainers can be scored against it on a real-molecule corpus,
RDKit's shipped ``Data/NCI/first_5K.smi`` (5,000 NCI compounds; no download needed).

RDKit types hydrogens separately (H1–H4, HS), so the contributions are computed on the molecule
with explicit hydrogens and each hydrogen's contribution is folded into its heavy atom: the heavy
atom contributions then sum exactly to ``CalcCrippenDescriptors(mol)[0]`` (which adds the
hydrogens too). Contributions taken on the heavy-atom molecule alone miss the hydrogens' share.

Public API: :data:`CORPUS`, :func:`corpus_summary`, :func:`crippen_graphs`, :func:`bond_contributions`,
:class:`CrippenGINE`, :func:`train_crippen_regressor` and :func:`r2_score`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import torch
from rdkit import Chem, RDConfig, rdBase
from rdkit.Chem import rdMolDescriptors
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINEConv, global_add_pool
from torch_geometric.utils import to_undirected

__all__ = [
    "CORPUS",
    "ELEMENTS",
    "BOND_TYPES",
    "NUM_ATOM_FEATURES",
    "NUM_BOND_FEATURES",
    "corpus_summary",
    "crippen_graphs",
    "bond_contributions",
    "CrippenGINE",
    "train_crippen_regressor",
    "r2_score",
]

CORPUS = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"
"""RDKit's 5,000 NCI compounds: one ``SMILES<TAB>id`` per line (a few lines lack the id)."""

ELEMENTS: tuple[str, ...] = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P", "B", "Si", "Se")
"""Elements with their own one-hot column; every other element shares a final "other" column."""

BOND_TYPES: tuple[Chem.BondType, ...] = (
    Chem.BondType.SINGLE,
    Chem.BondType.DOUBLE,
    Chem.BondType.TRIPLE,
    Chem.BondType.AROMATIC,
)
"""The ``edge_attr`` columns; molecules with any other bond type (e.g. dative) are skipped."""

_MAX_HS = 4  # total H count one-hot 0..3, then "4 or more"
_MAX_DEGREE = 5  # heavy-atom degree one-hot 0..4, then "5 or more"

# element (+ other) | aromatic | formal charge < 0, = 0, > 0 | Hs | degree
NUM_ATOM_FEATURES = len(ELEMENTS) + 1 + 1 + 3 + (_MAX_HS + 1) + (_MAX_DEGREE + 1)
NUM_BOND_FEATURES = len(BOND_TYPES)


# ----------------------------------------------------------------------------- graphs


def _atom_features(atom: Chem.Atom) -> list[float]:
    """One-hot element, aromatic flag, charge sign, H count and degree: what Crippen types read."""
    row = [0.0] * NUM_ATOM_FEATURES
    symbol = atom.GetSymbol()
    row[ELEMENTS.index(symbol) if symbol in ELEMENTS else len(ELEMENTS)] = 1.0
    offset = len(ELEMENTS) + 1
    row[offset] = float(atom.GetIsAromatic())
    offset += 1
    charge = atom.GetFormalCharge()
    row[offset + (0 if charge < 0 else 1 if charge == 0 else 2)] = 1.0
    offset += 3
    row[offset + min(atom.GetTotalNumHs(), _MAX_HS)] = 1.0
    offset += _MAX_HS + 1
    row[offset + min(atom.GetDegree(), _MAX_DEGREE)] = 1.0
    return row


def _heavy_atom_contribs(mol: Chem.Mol) -> list[float]:
    """Crippen logP contribution per heavy atom, each with its hydrogens' contributions added.

    Typed on ``AddHs(mol)`` (as ``CalcCrippenDescriptors`` does), whose first atoms are ``mol``'s
    atoms in ``mol``'s order; each appended hydrogen adds to its single heavy neighbour.
    """
    with_hs = Chem.AddHs(mol)
    contribs = [logp for logp, _mr in rdMolDescriptors._CalcCrippenContribs(with_hs)]
    heavy = contribs[: mol.GetNumAtoms()]
    for atom in list(with_hs.GetAtoms())[mol.GetNumAtoms() :]:
        (neighbour,) = atom.GetNeighbors()
        heavy[neighbour.GetIdx()] += contribs[atom.GetIdx()]
    return heavy


def _mol_to_graph(mol: Chem.Mol, smiles: str) -> Data:
    """The PyG graph of one heavy-atom molecule; node ``i`` is ``mol``'s atom ``i``."""
    x = torch.tensor([_atom_features(a) for a in mol.GetAtoms()], dtype=torch.float)
    pairs = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()]
    kinds = [BOND_TYPES.index(b.GetBondType()) for b in mol.GetBonds()]
    edge_index = torch.tensor(pairs, dtype=torch.long).t()
    one_hot = torch.nn.functional.one_hot(torch.tensor(kinds), NUM_BOND_FEATURES).float()
    # each bond appears once per direction after to_undirected, so no attributes are reduced
    edge_index, edge_attr = to_undirected(edge_index, one_hot, num_nodes=mol.GetNumAtoms())
    contrib = torch.tensor(_heavy_atom_contribs(mol), dtype=torch.float)
    logp = rdMolDescriptors.CalcCrippenDescriptors(mol)[0]
    return Data(
        x=x,
        edge_index=edge_index,
        edge_attr=edge_attr,
        y=torch.tensor([[logp]], dtype=torch.float),
        atom_contrib=contrib,
        smiles=smiles,
    )


def _corpus_molecules(path: Path) -> Iterator[tuple[str, Chem.Mol | None, str]]:
    """Per corpus line: the raw SMILES, the canonical molecule (``None`` when unusable), and why.

    The molecule is the parse of its own canonical SMILES, so its atom order is the canonical
    SMILES's: ``Chem.MolFromSmiles(data.smiles)`` reproduces the graph's node order.
    """
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            if not parts:
                continue
            raw = parts[0]
            mol = Chem.MolFromSmiles(raw)
            if mol is None:
                yield raw, None, "unparsable"
                continue
            mol = Chem.MolFromSmiles(Chem.MolToSmiles(mol))
            if mol is None:
                yield raw, None, "unparsable"
            elif len(Chem.GetMolFrags(mol)) > 1:
                yield raw, None, "fragments"
            elif mol.GetNumAtoms() < 2 or mol.GetNumBonds() == 0:
                yield raw, None, "too small"
            elif any(b.GetBondType() not in BOND_TYPES for b in mol.GetBonds()):
                yield raw, None, "bond type"
            else:
                yield raw, mol, "kept"


def corpus_summary(path: Path = CORPUS) -> dict[str, int]:
    """How many corpus lines :func:`crippen_graphs` keeps and skips, by reason."""
    counts: dict[str, int] = {}
    with rdBase.BlockLogs():
        for _raw, _mol, reason in _corpus_molecules(path):
            counts[reason] = counts.get(reason, 0) + 1
    return counts


def crippen_csv(path: Path = CORPUS) -> str:
    """The corpus as a user's regression table: CSV text with the header ``smiles,logp,id``, one
    row per line RDKit parses (its SMILES as written, RDKit's Crippen logP (``MolLogP``), the id
    ``nci-<line>``); salts and other molecules a model cannot take stay in, as in a real table,
    for the table reader to refuse with its messages."""
    import csv
    import io

    from rdkit.Chem import rdMolDescriptors

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["smiles", "logp", "id"])
    with rdBase.BlockLogs(), open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            parts = line.split()
            mol = Chem.MolFromSmiles(parts[0]) if parts else None
            if mol is not None:
                writer.writerow(
                    [
                        parts[0],
                        f"{rdMolDescriptors.CalcCrippenDescriptors(mol)[0]:.4f}",
                        f"nci-{line_no}",
                    ]
                )
    return out.getvalue()


def crippen_graphs(limit: int | None = None, path: Path = CORPUS) -> list[Data]:
    """The corpus as PyG graphs with Crippen logP targets, in file order (the first ``limit`` kept).

    Skips molecules that RDKit cannot parse, that have several fragments (salts, mixtures: we do
    not keep the largest fragment, because stripping a counter-ion changes the molecule whose logP
    is the target), fewer than two heavy atoms or no bond, or a bond that is not single, double,
    triple or aromatic. Per graph: ``x`` [n, NUM_ATOM_FEATURES] one-hot atom features,
    ``edge_index`` [2, 2b] both directions (coalesced), ``edge_attr`` [2b, 4] one-hot bond type,
    ``y`` [1, 1] Crippen logP, ``atom_contrib`` [n] per heavy atom (hydrogens folded in; sums to
    ``y``), ``smiles`` the canonical SMILES, whose parse has the graph's atom order.
    """
    graphs: list[Data] = []
    with rdBase.BlockLogs():
        for _raw, mol, _reason in _corpus_molecules(path):
            if mol is None:
                continue
            graphs.append(_mol_to_graph(mol, Chem.MolToSmiles(mol)))
            if limit is not None and len(graphs) >= limit:
                break
    return graphs


def bond_contributions(data: Data) -> Tensor:
    """Ground-truth importance per directed edge: the Crippen contributions of its two atoms, summed.

    Both directions of a bond get the same value.
    """
    src, dst = data.edge_index
    return data.atom_contrib[src] + data.atom_contrib[dst]


# ----------------------------------------------------------------------------- model


class CrippenGINE(nn.Module):
    """A bond-aware GIN regressor: GINEConv layers, a per-atom linear head, and a sum over atoms.

    The sum pooling mirrors Crippen's additivity: :meth:`node_contributions` is the model's own
    per-atom share of its prediction, comparable with ``atom_contrib``.
    """

    def __init__(
        self,
        in_channels: int = NUM_ATOM_FEATURES,
        edge_dim: int = NUM_BOND_FEATURES,
        hidden: int = 64,
        num_layers: int = 3,
    ) -> None:
        super().__init__()
        self.embed = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(
            GINEConv(
                nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)),
                train_eps=True,
                edge_dim=edge_dim,
            )
            for _ in range(num_layers)
        )
        self.head = nn.Linear(hidden, 1)

    def node_contributions(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        """Per-atom predicted contribution, shape [num_nodes, 1]; their per-graph sum is the output."""
        h = self.embed(x)
        for conv in self.convs:
            h = torch.relu(conv(h, edge_index, edge_attr))
        out: Tensor = self.head(h)
        return out

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_attr: Tensor | None = None,
        batch: Tensor | None = None,
    ) -> Tensor:
        """Predicted logP per graph, shape [num_graphs, 1]; ``batch=None`` means one graph.

        ``edge_attr`` (one-hot bond types) is required; it is a keyword for PyG's explainers.
        """
        if edge_attr is None:
            raise ValueError("CrippenGINE needs edge_attr (one-hot bond types, one row per edge)")
        out: Tensor = global_add_pool(self.node_contributions(x, edge_index, edge_attr), batch)
        return out


# ----------------------------------------------------------------------------- training


def r2_score(pred: Tensor, y: Tensor) -> float:
    """Coefficient of determination, 1 - SS_res / SS_tot, over all values."""
    pred, y = pred.reshape(-1).double(), y.reshape(-1).double()
    ss_res = ((y - pred) ** 2).sum()
    ss_tot = ((y - y.mean()) ** 2).sum()
    return float(1.0 - ss_res / ss_tot)


@torch.no_grad()
def _predict(model: nn.Module, loader: DataLoader) -> tuple[Tensor, Tensor]:
    """Predictions and targets over a loader, model in eval mode."""
    model.eval()
    preds, ys = [], []
    for batch in loader:
        preds.append(model(batch.x, batch.edge_index, edge_attr=batch.edge_attr, batch=batch.batch))
        ys.append(batch.y)
    return torch.cat(preds), torch.cat(ys)


def train_crippen_regressor(
    graphs: Sequence[Data],
    *,
    seed: int = 0,
    epochs: int = 60,
    split: tuple[float, float, float] = (0.8, 0.1, 0.1),
    patience: int = 15,
    batch_size: int = 64,
    lr: float = 3e-3,
    hidden: int = 64,
    model: Optional[nn.Module] = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Train a :class:`CrippenGINE` (or ``model``, built by the caller with the same
    ``forward(x, edge_index, edge_attr=..., batch=...)`` keywords and one output) on a seeded
    random split; keep the best-validation-R² weights.

    Adam with MSE loss; stops when validation R² has not improved for ``patience`` epochs.
    Returns the model in eval mode and ``{"train_r2", "val_r2", "test_r2", "epochs", "seconds",
    "train_idx", "val_idx", "test_idx"}`` (``epochs``: the epochs run; indices into ``graphs``).
    The same seed and graphs give the same split, weights and metrics (on the same machine and
    thread count). Measured on the full corpus (4,853 graphs, one CPU thread): test R² ≈ 0.998
    after the default 60 epochs in about 35 s; 5 epochs already give ≈ 0.96.
    """
    if len(split) != 3 or min(split) <= 0 or abs(sum(split) - 1.0) > 1e-6:
        raise ValueError(f"split must be three positive fractions summing to 1, got {split}")
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(graphs), generator=generator).tolist()
    n_train = int(round(split[0] * len(graphs)))
    n_val = int(round(split[1] * len(graphs)))
    train_idx, val_idx = order[:n_train], order[n_train : n_train + n_val]
    test_idx = order[n_train + n_val :]
    if not (train_idx and val_idx and test_idx):
        raise ValueError(f"{len(graphs)} graphs are too few for the split {split}")

    torch.manual_seed(seed)
    if model is None:
        model = CrippenGINE(hidden=hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=10)
    train_loader = DataLoader(
        [graphs[i] for i in train_idx], batch_size=batch_size, shuffle=True, generator=generator
    )
    eval_loaders = {
        name: DataLoader([graphs[i] for i in idx], batch_size=256)
        for name, idx in (("train", train_idx), ("val", val_idx), ("test", test_idx))
    }

    best_r2, best_state, since_best = float("-inf"), copy.deepcopy(model.state_dict()), 0
    epochs_run = 0
    while epochs_run < epochs:
        epochs_run += 1
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            pred = model(batch.x, batch.edge_index, edge_attr=batch.edge_attr, batch=batch.batch)
            loss = torch.nn.functional.mse_loss(pred, batch.y)
            loss.backward()
            optimizer.step()
        val_r2 = r2_score(*_predict(model, eval_loaders["val"]))
        scheduler.step(-val_r2)
        if val_r2 > best_r2:
            best_r2, best_state, since_best = val_r2, copy.deepcopy(model.state_dict()), 0
        else:
            since_best += 1
            if since_best >= patience:
                break

    model.load_state_dict(best_state)
    model.eval()
    metrics: dict[str, Any] = {
        f"{name}_r2": r2_score(*_predict(model, loader)) for name, loader in eval_loaders.items()
    }
    metrics.update(
        epochs=epochs_run,
        seconds=time.perf_counter() - start,
        train_idx=train_idx,
        val_idx=val_idx,
        test_idx=test_idx,
    )
    return model, metrics
