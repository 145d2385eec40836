"""Molecules for the app: SMILES in, dataset-like graph out, explanations drawn on the molecule.

The target GNN was trained on TU Mutagenicity, whose graphs follow fixed conventions
(REFERENCE.md §6): explicit hydrogens as nodes, Kekulé bond orders only (labels 0/1/2 for
single/double/triple), no formal charges, nitro groups as one N=O plus one N–O. A user's SMILES
is brought to the same form by ``Chem.AddHs`` then ``Chem.Kekulize(clearAromaticFlags=True)``.

Numbering contract: the node ``k`` of :attr:`MoleculeInstance.instance` is atom ``k`` of
:attr:`MoleculeInstance.mol`, which is atom ``k`` of
``Chem.AddHs(Chem.MolFromSmiles(result.input_smiles))`` (``input_smiles`` is the user's SMILES,
stripped, or its largest fragment when that option is used).

Everything here is local: drawing produces SVG text with RDKit and never reaches a network.
"""
from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

import torch
from rdkit import Chem, rdBase
from rdkit.Chem import rdDepictor
from rdkit.Chem.Draw import rdMolDraw2D
from rdkit.Chem.rdMolDescriptors import CalcMolFormula

from gem_core.data.datasets import BOND_ORDERS, MUTAGENICITY_ATOMS
from gem_core.data.instances import Instance

__all__ = [
    "MoleculeError", "MoleculeInstance", "EXAMPLE_SMILES", "HIGHLIGHT_HEX",
    "smiles_to_instance", "largest_fragment", "instance_to_mol", "bond_index_of_pair",
    "draw_molecule_svg", "fragment_smarts", "fragment_smiles", "without_hydrogens",
]

DATASET = "mutagenicity"
DEFAULT_MAX_ATOMS = 200
#: Molecules above this many atoms (incl. H) are rarer than 38 of the 4,337 training graphs.
LARGE_MOLECULE_ATOMS = 100

#: Colour of the most important explanation bond; weaker bonds are lighter shades of it.
HIGHLIGHT_HEX = "#E8590C"
HIGHLIGHT_RGB = tuple(int(HIGHLIGHT_HEX[i:i + 2], 16) / 255 for i in (1, 3, 5))
#: Colour of outlined bonds (the molecule's toxicophores on the Molecule page).
OUTLINE_HEX = "#1A9E8F"
OUTLINE_RGB = tuple(int(OUTLINE_HEX[i:i + 2], 16) / 255 for i in (1, 3, 5))
_MIN_SHADE = 0.3  # intensity of the weakest highlighted bond when scores are given

_BOND_LABEL = {Chem.BondType.SINGLE: 0, Chem.BondType.DOUBLE: 1, Chem.BondType.TRIPLE: 2}
_LABEL_BOND = {0: Chem.BondType.SINGLE, 1: Chem.BondType.DOUBLE, 2: Chem.BondType.TRIPLE}
assert len(_LABEL_BOND) == len(BOND_ORDERS)
_ATOM_COLUMN = {s: i for i, s in enumerate(MUTAGENICITY_ATOMS)}
# Rows of these are the one-hot node / edge features (``index_select`` copies them).
_ATOM_ONE_HOT = torch.eye(len(MUTAGENICITY_ATOMS))
_BOND_ONE_HOT = torch.eye(len(BOND_ORDERS))

#: Example molecules for the app (name -> SMILES); every one converts with smiles_to_instance.
EXAMPLE_SMILES: dict[str, str] = {
    "2-Nitrofluorene (nitro-aromatic)": "O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2",
    "Nitrobenzene (nitro-aromatic)": "O=[N+]([O-])c1ccccc1",
    "2-Aminoanthracene (aromatic amine)": "Nc1ccc2cc3ccccc3cc2c1",
    "Phenyl azide (aromatic azide)": "[N-]=[N+]=Nc1ccccc1",
    "Styrene oxide (epoxide)": "C1OC1c1ccccc1",
    "Benzo[a]pyrene (polycyclic aromatic)": "c1ccc2c(c1)cc1ccc3cccc4ccc2c1c34",
    "Benzoic acid (non-mutagen)": "OC(=O)c1ccccc1",
}

# Charges that only encode a neutral dataset group: the graph (elements + bond orders) is the
# same as the dataset's uncharged form, so they need no warning.
_NEUTRAL_GROUPS = tuple(Chem.MolFromSmarts(s) for s in (
    "[#7+](=[#8])-[#8-]",          # nitro  [N+](=O)[O-]  -> dataset N=O + N-O
    "[#7-]=[#7+]=*",               # azide  N=[N+]=[N-]   -> dataset N=N=N (also diazo C=N=N)
    "[#7-]-[#7+]#[#7]",            # azide  [N-]-[N+]#N
    "[#6-]-[#7+]#[#7]",            # diazo  [CH-]-[N+]#N
))


class MoleculeError(ValueError):
    """A SMILES (or an uploaded file) the app cannot turn into a Mutagenicity-like graph.

    ``str(err)`` is a message for the user; ``err.kind`` names the problem for code:
    ``empty``, ``parse``, ``valence``, ``kekulize``, ``fragments``, ``element``, ``bond_type``,
    ``too_large``, ``no_bonds``, ``file``.
    """

    def __init__(self, message: str, kind: str = "invalid"):
        super().__init__(message)
        self.kind = kind


@dataclass
class MoleculeInstance:
    """A user's molecule as the target GNN sees it, with the RDKit molecule for drawing.

    Attributes:
        instance: graph instance (dataset "mutagenicity", ``y=-1`` = unknown label,
            ``edge_attr`` one-hot bond order ``[P, 3]``).
        mol: RDKit molecule with explicit hydrogens and Kekulé bonds; atom ``k`` is node ``k``.
        smiles: canonical SMILES (heavy atoms, aromatic notation).
        input_smiles: the SMILES actually parsed (``mol`` numbering is
            ``Chem.AddHs(Chem.MolFromSmiles(input_smiles))``).
        warnings: notes for the user (charges, removed fragments, radicals, size).
        name: optional name (the text after the SMILES, or set by the caller).
        pair_bond_index: RDKit bond index of each column of ``instance.pairs``.
    """

    instance: Instance
    mol: Chem.Mol
    smiles: str
    input_smiles: str
    warnings: list[str] = field(default_factory=list)
    name: str = ""
    pair_bond_index: list[int] = field(default_factory=list)

    @property
    def num_atoms(self) -> int:
        """Atoms including hydrogens (= graph nodes)."""
        return self.mol.GetNumAtoms()

    @property
    def num_heavy_atoms(self) -> int:
        return self.mol.GetNumHeavyAtoms()

    @property
    def formula(self) -> str:
        return CalcMolFormula(self.mol)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The graph's undirected edges ``(u, v)``, ``u < v``, in ``instance.pairs`` order."""
        return [(int(u), int(v)) for u, v in self.instance.pairs.t().tolist()]


# ----------------------------------------------------------------------------- parsing

_PARSE_REASON = re.compile(r"SMILES Parse Error:\s*(.+?)(?:\s+while parsing.*|\s+for input.*)?$")
_PARSE_POSITION = re.compile(r"check for mistakes around position (\d+)")


def _show(text: str, limit: int = 80) -> str:
    """Quoted SMILES for a message, shortened in the middle when very long."""
    if len(text) > limit:
        text = f"{text[:limit // 2 - 2]} ... {text[-(limit // 2 - 3):]}"
    return repr(text)


def _parse_failure_message(smiles: str, log: str) -> str:
    reason, position = "", None
    for line in log.splitlines():
        m = _PARSE_POSITION.search(line)
        if m:
            position = int(m.group(1))
            continue
        m = _PARSE_REASON.search(line)
        if m and not reason and not m.group(1).startswith("Failed parsing"):
            reason = m.group(1).strip().rstrip(":")
    detail = reason or "syntax error"
    if position is not None:
        detail += f" near position {position}"
    return (f"Could not parse {_show(smiles)} as SMILES ({detail}). Check brackets, ring-closure "
            f"digits and element symbols.")


def _sanitize_failure(smiles: str, mol: Chem.Mol) -> Optional[MoleculeError]:
    """Re-run sanitisation on an unsanitised parse to name what is chemically wrong."""
    try:
        Chem.SanitizeMol(mol)
    except Chem.KekulizeException as exc:
        atoms = re.findall(r"\d+", str(exc).split(":")[-1])
        where = f" (atom indices {', '.join(atoms)})" if atoms else ""
        return MoleculeError(
            f"The aromatic system of {_show(smiles)} cannot be kekulized, i.e. written with alternating "
            f"single and double bonds{where}. Usually an aromatic nitrogen needs its hydrogen "
            f"written as [nH] (pyrrole: c1cc[nH]c1), or the ring is not really aromatic: write it "
            f"with explicit single/double bonds.", "kekulize")
    except Chem.AtomValenceException as exc:
        return MoleculeError(
            f"{_show(smiles)} is chemically invalid: {exc}. Check the number of bonds on that atom "
            f"(or write its charge, e.g. [N+]).", "valence")
    except Exception as exc:  # other MolSanitizeException subclasses
        return MoleculeError(f"{_show(smiles)} is chemically invalid: {exc}.", "valence")
    return None


def _parse(smiles: str) -> Chem.Mol:
    """Sanitised RDKit molecule of a stripped SMILES, or a :class:`MoleculeError` saying why not."""
    # One sanitising parse on the (common) success path; only a failure is parsed again,
    # unsanitised and with the error log captured, to tell a syntax error (its message) from
    # a chemically invalid molecule.
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
    if mol is not None:
        return mol
    with rdBase.CaptureErrorLog() as capture:
        raw = Chem.MolFromSmiles(smiles, sanitize=False)
    if raw is None:
        raise MoleculeError(_parse_failure_message(smiles, capture.messages), "parse")
    with rdBase.BlockLogs():
        err = _sanitize_failure(smiles, raw)
    raise err or MoleculeError(f"{_show(smiles)} is not a valid molecule.", "valence")


def _clean(smiles: str) -> tuple[str, str]:
    """``(smiles, name)`` from user text: strips, and splits off a name after whitespace."""
    if smiles is None:
        smiles = ""
    if not isinstance(smiles, str):
        raise MoleculeError(f"Expected a SMILES string, got {type(smiles).__name__}.", "empty")
    parts = smiles.strip().split(None, 1)
    if not parts:
        raise MoleculeError("No SMILES given: paste a SMILES string, e.g. O=[N+]([O-])c1ccccc1 "
                            "(nitrobenzene).", "empty")
    return parts[0], (parts[1].strip() if len(parts) > 1 else "")


def _fragment_key(frag: Chem.Mol) -> tuple[int, int]:
    return frag.GetNumHeavyAtoms(), frag.GetNumAtoms() + sum(a.GetTotalNumHs() for a in frag.GetAtoms())


def _fragments(mol: Chem.Mol) -> list[Chem.Mol]:
    with rdBase.BlockLogs():
        return list(Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False))


def largest_fragment(smiles: str) -> str:
    """SMILES of the largest fragment (most heavy atoms, then most atoms incl. H; first on ties).

    ``"CC(=O)[O-].[Na+]"`` -> ``"CC(=O)[O-]"``. A single-fragment SMILES comes back canonical.
    """
    text, _ = _clean(smiles)
    frags = _fragments(_parse(text))
    best = max(range(len(frags)), key=lambda i: (_fragment_key(frags[i]), -i))
    return Chem.MolToSmiles(frags[best])


def _atom_label(atom: Chem.Atom) -> str:
    return f"{atom.GetSymbol()}{atom.GetIdx()}"


def _atom_list(mol: Chem.Mol, count: Optional[int] = None) -> list[Chem.Atom]:
    """The first ``count`` (default: all) atoms of ``mol``, without RDKit's slow Python iterator."""
    return list(map(mol.GetAtomWithIdx, range(mol.GetNumAtoms() if count is None else count)))


def _charge_warnings(mol: Chem.Mol, atoms: Optional[list[Chem.Atom]] = None) -> list[str]:
    """Warnings for charged and radical atoms. ``atoms``: the atoms that can carry a charge or
    a radical (default: all of ``mol``; hydrogens added by ``AddHs`` carry neither)."""
    if atoms is None:
        atoms = _atom_list(mol)
    charged = [a for a in atoms if a.GetFormalCharge() != 0]
    if charged:  # the neutral-group SMARTS only matter when some atom is charged
        exempt: set[int] = set()
        for patt in _NEUTRAL_GROUPS:
            for match in mol.GetSubstructMatches(patt):
                exempt.update(match)
        charged = [a for a in charged if a.GetIdx() not in exempt]
    out = []
    if charged:
        listed = ", ".join(f"{_atom_label(a)} ({a.GetFormalCharge():+d})" for a in charged[:10])
        more = f" and {len(charged) - 10} more" if len(charged) > 10 else ""
        out.append(
            f"Formal charge on {listed}{more}. The training molecules carry no charges (only "
            f"nitro and azide groups, which are converted), and the model sees elements and bond "
            f"orders only, so the charged form is read as an unusual neutral graph.")
    radicals = [a for a in atoms if a.GetNumRadicalElectrons() > 0]
    if radicals:
        out.append("Radical (unpaired-electron) atoms: " + ", ".join(_atom_label(a) for a in radicals)
                   + ". Hydrogens are not added to them; the training data has no radicals.")
    return out


def _one_hot(table: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
    """A new ``[len(rows), k]`` tensor of one-hot rows (in the default dtype, like torch.zeros)."""
    if table.dtype != torch.get_default_dtype():  # the default dtype changed after import
        table = table.to(torch.get_default_dtype())
    return table.index_select(0, torch.tensor(rows))


def smiles_to_instance(smiles: str, max_atoms: int = DEFAULT_MAX_ATOMS,
                       keep_largest_fragment: bool = False) -> MoleculeInstance:
    """Parse a SMILES into a Mutagenicity-like graph instance plus its RDKit molecule.

    Text after whitespace is taken as the molecule's name (``"CCO ethanol"``). Steps:
    ``MolFromSmiles`` -> ``AddHs`` -> ``Kekulize(clearAromaticFlags=True)`` -> one-hot atoms over
    ``MUTAGENICITY_ATOMS`` and bond-order one-hot per pair (single 0, double 1, triple 2).

    Args:
        smiles: the SMILES.
        max_atoms: largest accepted molecule, counting hydrogens.
        keep_largest_fragment: for salts and mixtures, keep the largest fragment (noted in
            ``warnings``) instead of raising.

    Raises:
        MoleculeError: empty input, unparsable or chemically invalid SMILES, aromatic rings that
            cannot be kekulized, several fragments, elements outside the 14 training elements,
            unsupported bond types, more than ``max_atoms`` atoms, or no bond at all.
    """
    text, name = _clean(smiles)
    mol = _parse(text)
    warnings: list[str] = []

    if len(Chem.GetMolFrags(mol)) > 1:  # atom-index tuples: cheap; fragment mols only if needed
        frags = _fragments(mol)
        best = max(range(len(frags)), key=lambda i: (_fragment_key(frags[i]), -i))
        # SMILES only of the fragments a message shows: the first 7 and the largest
        frag_smiles = {i: Chem.MolToSmiles(frags[i])
                       for i in sorted({*range(min(7, len(frags))), best})}
        if not keep_largest_fragment:
            shown = (", ".join(frag_smiles[i] for i in range(min(6, len(frags))))
                     + (", ..." if len(frags) > 6 else ""))
            shown = shown if len(shown) < 300 else shown[:297] + "..."
            raise MoleculeError(
                f"{_show(text)} has {len(frags)} disconnected fragments ({shown}): a salt or mixture. "
                f"The model explains one connected molecule: keep the largest fragment, "
                f"{frag_smiles[best]}.", "fragments")
        removed = [frag_smiles[i] for i in range(min(7, len(frags))) if i != best][:6]
        text = frag_smiles[best]
        mol = _parse(text)
        warnings.append(f"Kept the largest of {len(frags)} fragments ({text}); removed "
                        f"{', '.join(removed)}{', ...' if len(frags) - 1 > 6 else ''}.")

    # Node k < n0 of the graph is atom k of ``mol``; AddHs appends the hydrogens after them.
    n0 = mol.GetNumAtoms()
    symbols = [a.GetSymbol() for a in _atom_list(mol)]
    columns = [_ATOM_COLUMN.get(sym) for sym in symbols]
    if None in columns:
        unsupported: list[str] = []
        for sym in symbols:
            if sym not in _ATOM_COLUMN and sym not in unsupported:
                unsupported.append(sym)
        listed = ", ".join("'*' (wildcard)" if s == "*" else s for s in unsupported)
        raise MoleculeError(
            f"{_show(text)} contains {'elements' if len(unsupported) > 1 else 'an element'} the model "
            f"was not trained on: {listed}. Supported elements: {', '.join(MUTAGENICITY_ATOMS)}.", "element")

    molh = Chem.AddHs(mol)
    n = molh.GetNumAtoms()
    if n > max_atoms:
        raise MoleculeError(
            f"{_show(text)} has {n} atoms including hydrogens, more than the limit of {max_atoms} "
            f"({mol.GetNumHeavyAtoms()} heavy atoms).", "too_large")
    num_bonds = molh.GetNumBonds()
    if num_bonds == 0:
        raise MoleculeError(
            f"{_show(text)} is a single atom with no bonds: there is nothing to explain (an explanation "
            f"is a set of bonds).", "no_bonds")
    try:
        Chem.Kekulize(molh, clearAromaticFlags=True)
    except Exception as exc:  # sanitised input kekulizes; kept for safety
        raise MoleculeError(f"The aromatic system of {_show(text)} cannot be kekulized ({exc}).",
                            "kekulize") from exc

    bonds = []  # (u, v, label, bond index) with u < v
    bad_bonds = []
    for k, b in enumerate(map(molh.GetBondWithIdx, range(num_bonds))):
        u, v, bond_type = b.GetBeginAtomIdx(), b.GetEndAtomIdx(), b.GetBondType()
        label = _BOND_LABEL.get(bond_type)
        if label is None:
            bad_bonds.append(bond_type)
        bonds.append((u, v, label, k) if u < v else (v, u, label, k))
    if bad_bonds:
        kinds = sorted({str(t).lower() for t in bad_bonds})
        raise MoleculeError(
            f"{_show(text)} has bond types the dataset does not use ({', '.join(kinds)}); only single, "
            f"double and triple bonds are supported.", "bond_type")

    warnings.extend(_charge_warnings(molh, _atom_list(molh, n0)))
    if n > LARGE_MOLECULE_ATOMS:
        warnings.append(f"{n} atoms including hydrogens: larger than all but 38 of the 4,337 "
                        f"training molecules, so the prediction is less reliable.")

    columns.extend([_ATOM_COLUMN["H"]] * (n - n0))
    x = _one_hot(_ATOM_ONE_HOT, columns)
    bonds.sort()
    us, vs, labels, bond_idx = zip(*bonds)
    pairs = torch.tensor([us, vs], dtype=torch.long)
    edge_attr = _one_hot(_BOND_ONE_HOT, labels)

    inst = Instance(x=x, pairs=pairs, y=-1, target=None, edge_attr=edge_attr, dataset=DATASET, index=-1)
    return MoleculeInstance(
        instance=inst, mol=molh, smiles=Chem.MolToSmiles(mol), input_smiles=text,
        warnings=warnings, name=name, pair_bond_index=list(bond_idx))


# ----------------------------------------------------------------------------- dataset graphs

@functools.lru_cache(maxsize=8)
def _atom_templates(symbols: tuple[str, ...]) -> tuple[Chem.Atom, ...]:
    """One no-implicit-H atom per type; ``AddAtom`` copies it (3x faster than a new Atom per node)."""
    out = []
    for sym in symbols:
        atom = Chem.Atom(sym)
        atom.SetNoImplicit(True)
        out.append(atom)
    return tuple(out)


def _restore_group_charges(rw: Chem.RWMol, columns: list[int], symbols: list[str],
                           pairs: list[list[int]], labels: list[int]) -> None:
    """Charge the dataset's neutral nitro (N=O + N–O), azide (N=N=N) and diazo (C=N=N) groups.

    The graph is unchanged (same elements and bond orders; the net charge stays 0), but RDKit
    then sees valid valences instead of a 4-valent N and a radical O / N.
    """
    n_col = symbols.index("N")
    o_col = symbols.index("O") if "O" in symbols else -1
    nitrogens = {a for a, col in enumerate(columns) if col == n_col}
    if not nitrogens:
        return
    degree = [0] * len(columns)
    nbrs: dict[int, list[tuple[int, int]]] = {a: [] for a in nitrogens}
    for (u, v), lab in zip(pairs, labels):
        degree[u] += 1
        degree[v] += 1
        if u in nitrogens:
            nbrs[u].append((v, lab))
        if v in nitrogens:
            nbrs[v].append((u, lab))
    for a, around in nbrs.items():
        if len(around) == 3:  # nitro: exactly one terminal =O and one terminal -O on the N
            double_o = [b for b, lab in around if columns[b] == o_col and lab == 1 and degree[b] == 1]
            single_o = [b for b, lab in around if columns[b] == o_col and lab == 0 and degree[b] == 1]
            if len(double_o) == 1 and len(single_o) == 1:
                rw.GetAtomWithIdx(a).SetFormalCharge(1)
                rw.GetAtomWithIdx(single_o[0]).SetFormalCharge(-1)
        elif len(around) == 2 and all(lab == 1 for _, lab in around):
            # azide R-N=N=N / diazo R2C=N=N: the middle N, exactly one terminal =N
            ends = [b for b, _ in around if columns[b] == n_col and degree[b] == 1]
            if len(ends) == 1 and all(degree[b] > 1 for b, _ in around if b != ends[0]):
                rw.GetAtomWithIdx(a).SetFormalCharge(1)
                rw.GetAtomWithIdx(ends[0]).SetFormalCharge(-1)


def instance_to_mol(instance: Union[Instance, MoleculeInstance],
                    atom_symbols: Sequence[str] = MUTAGENICITY_ATOMS,
                    restore_charges: bool = True) -> Chem.Mol:
    """An RDKit molecule of a Mutagenicity graph: atom ``k`` = node ``k``, bond ``p`` = pair ``p``.

    Hydrogens stay explicit atoms (``SetNoImplicit(True)``, so RDKit adds none), bond orders come
    from ``edge_attr`` (single when absent). Dataset conventions such as a neutral nitro N=O + N–O
    break full sanitisation, so only partial sanitisation is applied
    (``UpdatePropertyCache(strict=False)``, then every step but PROPERTIES and KEKULIZE with
    ``catchErrors=True``); aromaticity is perceived where possible. Never raises for a graph of
    the dataset; a failed step is recorded in the int property ``gem_sanitize_failed``.

    With ``restore_charges`` (default) the dataset's neutral nitro N=O + N–O and azide N=N=N
    (diazo C=N=N) get the usual formal charges (``[N+](=O)[O-]``, ``N=[N+]=[N-]``): same graph,
    net charge 0, but drawn and written as chemists expect (no 4-valent N, no radical O). Other
    oddities of the data stay as they are: 83 graphs keep a 4-valent neutral N or 3-valent O, and
    some atoms lack hydrogens (RDKit marks them as radicals).
    """
    inst = getattr(instance, "instance", instance)
    x = inst.x
    if x.dim() != 2 or x.size(1) != len(atom_symbols):
        raise ValueError(f"node features must be one-hot over {len(atom_symbols)} atom types, "
                         f"got shape {tuple(x.shape)}")
    if x.size(0) and bool((x.abs().sum(1) == 0).any()):
        raise ValueError("some node has an all-zero feature row: no atom type to rebuild")
    columns = x.argmax(1).tolist()
    labels = ([0] * inst.num_pairs if inst.edge_attr is None
              else inst.edge_attr.reshape(inst.num_pairs, -1).argmax(1).tolist())

    templates = _atom_templates(tuple(atom_symbols))
    rw = Chem.RWMol()
    for col in columns:
        rw.AddAtom(templates[col])
    pair_list = inst.pairs.t().tolist()
    for (u, v), lab in zip(pair_list, labels):
        rw.AddBond(int(u), int(v), _LABEL_BOND.get(int(lab), Chem.BondType.SINGLE))
    if restore_charges and "N" in atom_symbols:
        _restore_group_charges(rw, columns, list(atom_symbols), pair_list, labels)
    mol = rw.GetMol()
    with rdBase.BlockLogs():
        mol.UpdatePropertyCache(strict=False)
        failed = Chem.SanitizeMol(
            mol, sanitizeOps=Chem.SanitizeFlags.SANITIZE_ALL ^ Chem.SanitizeFlags.SANITIZE_PROPERTIES
            ^ Chem.SanitizeFlags.SANITIZE_KEKULIZE, catchErrors=True)
    mol.SetIntProp("gem_sanitize_failed", int(failed))
    return mol


# ----------------------------------------------------------------------------- pairs and bonds

def bond_index_of_pair(mol: Chem.Mol) -> dict[tuple[int, int], int]:
    """``{(i, j): bond index}`` for every bond, keyed with ``i < j``."""
    out = {}
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        out[(min(i, j), max(i, j))] = b.GetIdx()
    return out


def _as_pair_list(pairs) -> list[tuple[int, int]]:
    """Pairs as ``[(i, j), ...]`` from a list of pairs or a ``[2, P]`` (or ``[P, 2]``) array."""
    if pairs is None:
        return []
    if hasattr(pairs, "shape") and hasattr(pairs, "tolist"):
        arr = pairs.tolist()
        shape = tuple(pairs.shape)
        if len(shape) == 1 and shape[0] == 0:
            return []
        if len(shape) != 2 or 2 not in shape:
            raise ValueError(f"pairs must be [2, P] or [P, 2], got shape {shape}")
        rows = list(zip(*arr)) if shape[0] == 2 else arr
        return [(int(i), int(j)) for i, j in rows]
    out = []
    for p in pairs:
        i, j = p
        out.append((int(i), int(j)))
    return out


def _bond_indices(mol: Chem.Mol, pairs: Iterable[tuple[int, int]]) -> list[int]:
    out = []
    num_atoms = mol.GetNumAtoms()
    between = mol.GetBondBetweenAtoms
    for i, j in pairs:
        inside = 0 <= min(i, j) and max(i, j) < num_atoms
        bond = between(int(i), int(j)) if inside else None
        if bond is None:
            raise ValueError(f"atoms {i} and {j} are not bonded in this molecule")
        out.append(bond.GetIdx())
    return out


def fragment_smarts(mol: Chem.Mol, pairs, kind: str = "smarts") -> str:
    """The explanation fragment (the explained bonds and their atoms) as SMARTS (or SMILES).

    Disconnected selections come out dot-separated; an empty selection gives ``""``. On a
    molecule from :func:`smiles_to_instance` a nitro selection reads ``[#8]=[#7+]-[#8-]``; on a
    dataset molecule (no charges) ``[#8]=[#7]-[#8]``. ``kind="smiles"`` writes the fragment as
    SMILES instead (e.g. ``O=[N+][O-]``), which is easier to read but not a query.
    """
    pair_list = _as_pair_list(pairs)
    if not pair_list:
        return ""
    bonds = sorted(set(_bond_indices(mol, pair_list)))
    atoms = sorted({a for i, j in pair_list for a in (int(i), int(j))})
    with rdBase.BlockLogs():
        if kind == "smarts":
            return Chem.MolFragmentToSmarts(mol, atomsToUse=atoms, bondsToUse=bonds)
        if kind == "smiles":
            return Chem.MolFragmentToSmiles(mol, atomsToUse=atoms, bondsToUse=bonds, canonical=True)
    raise ValueError(f"kind must be 'smarts' or 'smiles', not {kind!r}")


def fragment_smiles(mol: Chem.Mol, pairs) -> str:
    """The explanation fragment as a chemist reads it: SMILES of its heavy atoms and the bonds
    between them, hydrogens as the atoms' H counts (a selected C-H bond adds nothing to read).

    Disconnected pieces come out dot-separated; a selection of hydrogen bonds only gives the
    heavy atoms they hang on. Numbering is ``mol``'s (explicit hydrogens included).
    """
    pair_list = _as_pair_list(pairs)
    if not pair_list:
        return ""
    _bond_indices(mol, pair_list)  # validates the pairs
    heavy, gone = _heavy_atom_mol(mol)
    atoms, bonds = set(), set()
    for i, j in pair_list:
        a, b = _index_after_removal(int(i), gone), _index_after_removal(int(j), gone)
        atoms.update(k for k in (a, b) if k is not None)
        if a is not None and b is not None:
            bonds.add(heavy.GetBondBetweenAtoms(a, b).GetIdx())
    with rdBase.BlockLogs():
        return Chem.MolFragmentToSmiles(heavy, atomsToUse=sorted(atoms),
                                        bondsToUse=sorted(bonds) or None, canonical=True)


_TERMINAL_H = Chem.MolFromSmarts("[#1;D1]~*")  # (hydrogen, its neighbour)
_ISOLATED_H = Chem.MolFromSmarts("[#1;D0]")


def _heavy_atom_mol(mol: Chem.Mol) -> tuple[Chem.Mol, list[int]]:
    """``(_without_hydrogens(mol, keep=set()), sorted indices of the removed hydrogens)``.

    The same molecule, built without per-atom Python loops: the hydrogens with at most one
    neighbour are found by SMARTS (``D`` is the atom degree), each neighbour's explicit H count
    grows by its removed hydrogens, and the hydrogens are removed in one batch (the kept atoms
    and bonds keep their relative order, as with one-by-one removal).
    """
    rw = Chem.RWMol(mol)
    size = rw.GetNumAtoms() + 1
    terminal = rw.GetSubstructMatches(_TERMINAL_H, uniquify=False, maxMatches=size)
    gone = sorted([h for h, _ in terminal]
                  + [h for h, in rw.GetSubstructMatches(_ISOLATED_H, maxMatches=size)])
    if gone:
        added: dict[int, int] = {}
        for _, nb in terminal:
            added[nb] = added.get(nb, 0) + 1
        for nb, count in added.items():
            atom = rw.GetAtomWithIdx(nb)
            atom.SetNumExplicitHs(atom.GetNumExplicitHs() + count)
        rw.BeginBatchEdit()
        for idx in gone:
            rw.RemoveAtom(idx)
        rw.CommitBatchEdit()
    with rdBase.BlockLogs():
        rw.UpdatePropertyCache(strict=False)
    return rw, gone  # the RWMol itself: GetMol() would copy it once more


def _index_after_removal(idx: int, gone: list[int]) -> Optional[int]:
    """Index of atom ``idx`` once the sorted atoms ``gone`` are removed (None if removed)."""
    pos = bisect.bisect_left(gone, idx)
    if pos < len(gone) and gone[pos] == idx:
        return None
    return idx - pos


# ----------------------------------------------------------------------------- drawing

def _shade(intensity: float) -> tuple[float, float, float]:
    a = min(max(float(intensity), 0.0), 1.0)
    return tuple(1.0 - a * (1.0 - c) for c in HIGHLIGHT_RGB)


def _intensities(pairs: list[tuple[int, int]], scores) -> list[float]:
    if scores is None:
        return [1.0] * len(pairs)
    if isinstance(scores, Mapping):
        vals = [float(scores.get((i, j), scores.get((j, i), 0.0))) for i, j in pairs]
    else:
        vals = [float(s) for s in (scores.tolist() if hasattr(scores, "tolist") else scores)]
        if len(vals) != len(pairs):
            raise ValueError(f"got {len(vals)} scores for {len(pairs)} highlighted pairs")
    vals = [v if v == v and v > 0 else 0.0 for v in vals]  # NaN and negatives -> weakest shade
    top = max(vals, default=0.0)
    if top <= 0:
        return [_MIN_SHADE] * len(pairs)
    return [_MIN_SHADE + (1 - _MIN_SHADE) * v / top for v in vals]


def without_hydrogens(mol: Chem.Mol, keep: set[int]) -> Chem.Mol:
    """``mol`` without its hydrogen atoms (those in ``keep`` stay): each removed hydrogen
    becomes an explicit H count of its neighbour, so labels read NH2, OH."""
    rw = Chem.RWMol(mol)
    gone = [a.GetIdx() for a in rw.GetAtoms()
            if a.GetAtomicNum() == 1 and a.GetIdx() not in keep and a.GetDegree() <= 1]
    for idx in sorted(gone, reverse=True):
        for nb in rw.GetAtomWithIdx(idx).GetNeighbors():
            nb.SetNumExplicitHs(nb.GetNumExplicitHs() + 1)
        rw.RemoveAtom(idx)
    out = rw.GetMol()
    with rdBase.BlockLogs():
        out.UpdatePropertyCache(strict=False)
    return out


_without_hydrogens = without_hydrogens


#: RDKit's cap on a drawn bond's length (its ``fixedBondLength``): a small molecule is drawn at the
#: scale of a mid-sized one instead of being blown up to fill the panel (ethane's one bond and its
#: highlight were a blot)
MAX_BOND_LENGTH = 40


def molecule_drawer(size: tuple[int, int], kind: str = "svg"):
    """An RDKit drawer of ``size`` pixels (``"svg"`` or ``"png"``), small molecules kept small."""
    cls = rdMolDraw2D.MolDraw2DSVG if kind == "svg" else rdMolDraw2D.MolDraw2DCairo
    drawer = cls(int(size[0]), int(size[1]))
    drawer.drawOptions().fixedBondLength = MAX_BOND_LENGTH
    return drawer


def draw_molecule_svg(mol: Chem.Mol, highlight_pairs: Sequence[tuple[int, int]] = (), scores=None,
                      size: tuple[int, int] = (450, 350), hide_hydrogens: bool = False,
                      atom_indices: bool = False, legend: str = "",
                      outline_pairs: Sequence[tuple[int, int]] = ()) -> str:
    """SVG of ``mol`` with the explanation bonds highlighted.

    Args:
        mol: molecule (atom numbering = graph node numbering, e.g. ``MoleculeInstance.mol`` or
            :func:`instance_to_mol`); not modified.
        highlight_pairs: explained bonds as atom pairs ``(i, j)`` (either order) or a ``[2, P]``
            tensor. Bonds and their end atoms are drawn in :data:`HIGHLIGHT_HEX`.
        scores: optional importance per highlighted pair (sequence aligned with
            ``highlight_pairs``, or a ``{(i, j): score}`` mapping). The highest score gets the full
            colour, the others lighter shades proportional to score (never below 30 %).
        size: ``(width, height)`` in pixels.
        hide_hydrogens: draw without the hydrogen atoms, except those on a highlighted (or
            outlined) bond, which stay drawn so every explanation bond is seen; the others become
            the H counts of their heavy atoms (NH2, CH3). Atoms are renumbered for drawing and
            mapped back, so highlights land on the right bonds.
        atom_indices: label each atom with its index in ``mol`` (also when hydrogens are hidden).
        legend: optional caption under the molecule.
        outline_pairs: bonds to mark in a second colour (:data:`OUTLINE_HEX`), e.g. the
            molecule's toxicophores; a bond in both sets is drawn in both colours, side by side.

    2D coordinates are recomputed deterministically (same molecule -> same picture).
    """
    pair_list = _as_pair_list(highlight_pairs)
    shades = [_shade(a) for a in _intensities(pair_list, scores)]
    _bond_indices(mol, pair_list)  # validates the pairs against the original numbering

    m = Chem.Mol(mol)
    for atom in m.GetAtoms():
        atom.SetIntProp("gem_orig_idx", atom.GetIdx())
    if hide_hydrogens:
        shown = {int(a) for pair in list(pair_list) + _as_pair_list(outline_pairs) for a in pair}
        m = _without_hydrogens(m, keep=shown)
    new_of_orig = {a.GetIntProp("gem_orig_idx"): a.GetIdx() for a in m.GetAtoms()}

    atom_colours: dict[int, tuple[float, float, float]] = {}
    bond_colours: dict[int, tuple[float, float, float]] = {}

    def _stronger(old, new):  # the darker (more important) shade wins
        return new if old is None or sum(new) < sum(old) else old

    for (i, j), colour in zip(pair_list, shades):
        a, b = new_of_orig.get(int(i)), new_of_orig.get(int(j))
        if a is not None and b is not None:
            bond = m.GetBondBetweenAtoms(a, b)
            bond_colours[bond.GetIdx()] = _stronger(bond_colours.get(bond.GetIdx()), colour)
        for k in (a, b):
            if k is not None:
                atom_colours[k] = _stronger(atom_colours.get(k), colour)

    if atom_indices:
        for atom in m.GetAtoms():
            atom.SetProp("atomNote", str(atom.GetIntProp("gem_orig_idx")))
    rdDepictor.Compute2DCoords(m)

    drawer = molecule_drawer(size)
    outline = _as_pair_list(outline_pairs)
    if outline:
        _bond_indices(mol, outline)
        atom_map = {k: [c] for k, c in atom_colours.items()}
        bond_map = {k: [c] for k, c in bond_colours.items()}
        for i, j in outline:
            a, b = new_of_orig.get(int(i)), new_of_orig.get(int(j))
            if a is not None and b is not None:
                bond_map.setdefault(m.GetBondBetweenAtoms(a, b).GetIdx(), []).append(OUTLINE_RGB)
            for k in (a, b):
                if k is not None and OUTLINE_RGB not in atom_map.setdefault(k, []):
                    atom_map[k].append(OUTLINE_RGB)
        with rdBase.BlockLogs():
            drawer.DrawMoleculeWithHighlights(m, legend, atom_map, bond_map, {}, {})
    else:
        with rdBase.BlockLogs():
            rdMolDraw2D.PrepareAndDrawMolecule(
                drawer, m, legend=legend,
                highlightAtoms=list(atom_colours), highlightAtomColors=atom_colours,
                highlightBonds=list(bond_colours), highlightBondColors=bond_colours)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
