"""SMILES in, Mutagenicity-style graph out: parsing, cleaning, fragments and charge warnings.

The target GNN was trained on TU Mutagenicity, whose graphs follow fixed conventions
(REFERENCE.md §6): explicit hydrogens as nodes, Kekulé bond orders only (labels 0/1/2 for
single/double/triple), no formal charges, nitro groups as one N=O plus one N–O. A user's SMILES
is brought to the same form by ``Chem.AddHs`` then ``Chem.Kekulize(clearAromaticFlags=True)``.

Numbering contract: the node ``k`` of :attr:`MoleculeInstance.instance` is atom ``k`` of
:attr:`MoleculeInstance.mol`, which is atom ``k`` of
``Chem.AddHs(Chem.MolFromSmiles(result.input_smiles))`` (``input_smiles`` is the user's SMILES,
stripped, or its largest fragment when that option is used).

Salts and mixtures (several fragments) follow a rule, :data:`SALT_RULES`: ``refuse`` (the
default: one connected molecule is explained), ``largest`` (the largest fragment alone) or
``whole`` (every fragment in one graph, counter-ions as atoms: how Mutagenicity's own graphs
keep them, and so what its models were trained on).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem.rdMolDescriptors import CalcMolFormula

from gem_core.data.config import SALT_RULES, check_salts, get_spec

if TYPE_CHECKING:
    import torch

    from gem_core.data.instances import Instance

__all__ = [
    "MoleculeError",
    "MoleculeInstance",
    "EXAMPLE_SMILES",
    "DEFAULT_MAX_ATOMS",
    "LARGE_MOLECULE_ATOMS",
    "smiles_to_instance",
    "largest_fragment",
    "SALT_RULES",
    "WHOLE_SALT_NOTE",
    "check_salts",
    "without_cx_extension",
    "REJECTION_WORDS",
]

DATASET = "mutagenicity"
DEFAULT_MAX_ATOMS = 200
#: Molecules above this many atoms (incl. H) are rare in the training split: 27 of its 3,469
#: molecules (38 of the data set's 4,337; tests/test_molecules.py checks both against the data).
LARGE_MOLECULE_ATOMS = 100
LARGE_TRAINING_MOLECULES = 27
TRAINING_MOLECULES = 3469

# gem_core.data.datasets.MUTAGENICITY_ATOMS, read from the dataset row: this module (and so the
# rejection of a bad SMILES) loads without torch and PyG, which only a valid molecule needs.
_atom_symbols = get_spec(DATASET).atom_symbols
assert _atom_symbols is not None, "the mutagenicity row names its one-hot atom columns"
MUTAGENICITY_ATOMS: tuple[str, ...] = _atom_symbols
_BOND_LABEL = {Chem.BondType.SINGLE: 0, Chem.BondType.DOUBLE: 1, Chem.BondType.TRIPLE: 2}
_ATOM_COLUMN = {s: i for i, s in enumerate(MUTAGENICITY_ATOMS)}


@functools.lru_cache(maxsize=None)
def _one_hot_tables() -> tuple[np.ndarray, np.ndarray]:
    """The atom and bond one-hot tables (float32 rows are node / edge features; a row lookup in
    numpy costs a third of torch's ``index_select`` on a molecule), made on first use."""
    from gem_core.data.datasets import BOND_ORDERS

    assert len(_BOND_LABEL) == len(BOND_ORDERS)
    return (
        np.eye(len(MUTAGENICITY_ATOMS), dtype=np.float32),
        np.eye(len(BOND_ORDERS), dtype=np.float32),
    )


#: how the warning of a salt read whole begins (tables count them by it)
WHOLE_SALT_NOTE = "Read whole:"


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
_NEUTRAL_GROUPS = tuple(
    Chem.MolFromSmarts(s)
    for s in (
        "[#7+](=[#8])-[#8-]",  # nitro  [N+](=O)[O-]  -> dataset N=O + N-O
        "[#7-]=[#7+]=*",  # azide  N=[N+]=[N-]   -> dataset N=N=N (also diazo C=N=N)
        "[#7-]-[#7+]#[#7]",  # azide  [N-]-[N+]#N
        "[#6-]-[#7+]#[#7]",  # diazo  [CH-]-[N+]#N
    )
)


#: each rejection ``kind`` (of :class:`MoleculeError` and of a screened file's rows) in words
REJECTION_WORDS: dict[str, str] = {
    "empty": "empty",
    "parse": "invalid SMILES",
    "valence": "impossible valence",
    "kekulize": "aromatic system that cannot be kekulized",
    "fragments": "salt or mixture",
    "element": "unsupported element",
    "bond_type": "unsupported bond type",
    "too_large": "too large",
    "no_bonds": "single atom",
    "file": "unreadable file",
    "encoding": "not UTF-8",
    "invalid": "invalid",
    "unreadable_record": "unreadable SD record",
}


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
        text = f"{text[: limit // 2 - 2]} ... {text[-(limit // 2 - 3) :]}"
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
    return (
        f"Could not parse {_show(smiles)} as SMILES ({detail}). Check brackets, ring-closure "
        f"digits and element symbols."
    )


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
            f"with explicit single/double bonds.",
            "kekulize",
        )
    except Chem.AtomValenceException as exc:
        return MoleculeError(
            f"{_show(smiles)} is chemically invalid: {exc}. Check the number of bonds on that atom "
            f"(or write its charge, e.g. [N+]).",
            "valence",
        )
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


#: A ChemAxon extension block after a SMILES (``CCO |$;;$|``, ``C[C@H](O)CC |&1:1|``), as
#: Marvin and ChemDraw export: atom labels, enhanced stereo, coordinates. The graph the model
#: reads carries none of them, so the block is dropped.
_CX_EXTENSION = re.compile(r"^(\s*\S+)[ \t]+\|[^|\s]*\|(?=\s|$)")


def without_cx_extension(text: str) -> str:
    """``text`` without the CXSMILES extension block that follows its first word, if any:
    ``"CCO |$;;$| ethanol"`` -> ``"CCO ethanol"``; any other text comes back unchanged."""
    return _CX_EXTENSION.sub(r"\1", text, count=1)


def _clean(smiles: str) -> tuple[str, str]:
    """``(smiles, name)`` from user text: strips, drops a CXSMILES extension block, and splits
    off a name after whitespace."""
    if smiles is None:
        smiles = ""
    if not isinstance(smiles, str):
        raise MoleculeError(f"Expected a SMILES string, got {type(smiles).__name__}.", "empty")
    parts = without_cx_extension(smiles.strip()).split(None, 1)
    if not parts:
        raise MoleculeError(
            "No SMILES given: paste a SMILES string, e.g. O=[N+]([O-])c1ccccc1 (nitrobenzene).",
            "empty",
        )
    return parts[0], (parts[1].strip() if len(parts) > 1 else "")


def _fragment_key(frag: Chem.Mol) -> tuple[int, int]:
    return frag.GetNumHeavyAtoms(), frag.GetNumAtoms() + sum(
        a.GetTotalNumHs() for a in frag.GetAtoms()
    )


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
            f"orders only, so the charged form is read as an unusual neutral graph."
        )
    radicals = [a for a in atoms if a.GetNumRadicalElectrons() > 0]
    if radicals:
        out.append(
            "Radical (unpaired-electron) atoms: "
            + ", ".join(_atom_label(a) for a in radicals)
            + ". Hydrogens are not added to them; the training data has no radicals."
        )
    return out


def _one_hot(table: np.ndarray, rows: Sequence[int]) -> torch.Tensor:
    """A new ``[len(rows), k]`` tensor of one-hot rows, in the default dtype (like torch.zeros)."""
    import torch

    out = torch.from_numpy(table[np.asarray(rows, dtype=np.intp)])
    dtype = torch.get_default_dtype()
    return out if out.dtype == dtype else out.to(dtype)


def smiles_to_instance(
    smiles: str, max_atoms: int = DEFAULT_MAX_ATOMS, salts: str = "refuse"
) -> MoleculeInstance:
    """Parse a SMILES into a Mutagenicity-like graph instance plus its RDKit molecule.

    Text after whitespace is taken as the molecule's name (``"CCO ethanol"``); a CXSMILES
    extension block (``"CCO |$;;$|"``) is dropped. Steps:
    ``MolFromSmiles`` -> ``AddHs`` -> ``Kekulize(clearAromaticFlags=True)`` -> one-hot atoms over
    ``MUTAGENICITY_ATOMS`` and bond-order one-hot per pair (single 0, double 1, triple 2).

    Args:
        smiles: the SMILES.
        max_atoms: largest accepted molecule, counting hydrogens.
        salts: how a salt or mixture is read (:data:`SALT_RULES`): ``refuse`` raises,
            ``largest`` keeps the largest fragment, ``whole`` keeps every fragment in one graph
            (both noted in ``warnings``).

    Raises:
        MoleculeError: empty input, unparsable or chemically invalid SMILES, aromatic rings that
            cannot be kekulized, several fragments (``salts="refuse"``), elements outside the
            14 training elements, unsupported bond types, more than ``max_atoms`` atoms, or no
            bond at all.
    """
    check_salts(salts)
    text, name = _clean(smiles)
    mol = _parse(text)
    warnings: list[str] = []

    fragments = Chem.GetMolFrags(mol)  # atom-index tuples: cheap; fragment mols only if needed
    if len(fragments) > 1 and salts != "whole":
        frags = _fragments(mol)
        best = max(range(len(frags)), key=lambda i: (_fragment_key(frags[i]), -i))
        # SMILES only of the fragments a message shows: the first 7 and the largest
        frag_smiles = {
            i: Chem.MolToSmiles(frags[i]) for i in sorted({*range(min(7, len(frags))), best})
        }
        if salts == "refuse":
            shown = ", ".join(frag_smiles[i] for i in range(min(6, len(frags)))) + (
                ", ..." if len(frags) > 6 else ""
            )
            shown = shown if len(shown) < 300 else shown[:297] + "..."
            raise MoleculeError(
                f"{_show(text)} has {len(frags)} disconnected fragments ({shown}): a salt or mixture. "
                f"The model explains one connected molecule: keep the largest fragment, "
                f"{frag_smiles[best]}, or read the salt whole (its counter-ions as atoms).",
                "fragments",
            )
        removed = [frag_smiles[i] for i in range(min(7, len(frags))) if i != best][:6]
        text = frag_smiles[best]
        mol = _parse(text)
        warnings.append(
            f"Kept the largest of {len(frags)} fragments ({text}); removed "
            f"{', '.join(removed)}{', ...' if len(frags) - 1 > 6 else ''}."
        )
    elif len(fragments) > 1:
        warnings.append(
            f"{WHOLE_SALT_NOTE} its {len(fragments)} fragments are one graph (the counter-ions "
            f"are atoms of it, as in Mutagenicity's own graphs)."
        )

    # Node k < n0 of the graph is atom k of ``mol``; AddHs appends the hydrogens after them.
    n0 = mol.GetNumAtoms()
    heavy_atoms = _atom_list(mol)  # atom k of mol is atom k of molh below
    symbols = [a.GetSymbol() for a in heavy_atoms]
    if any(sym not in _ATOM_COLUMN for sym in symbols):
        unsupported: list[str] = []
        for sym in symbols:
            if sym not in _ATOM_COLUMN and sym not in unsupported:
                unsupported.append(sym)
        listed = ", ".join("'*' (wildcard)" if s == "*" else s for s in unsupported)
        raise MoleculeError(
            f"{_show(text)} contains {'elements' if len(unsupported) > 1 else 'an element'} the model "
            f"was not trained on: {listed}. Supported elements: {', '.join(MUTAGENICITY_ATOMS)}.",
            "element",
        )
    columns = [_ATOM_COLUMN[sym] for sym in symbols]

    molh = Chem.AddHs(mol)
    n = molh.GetNumAtoms()
    if n > max_atoms:
        heavy = mol.GetNumHeavyAtoms()
        raise MoleculeError(
            f"{_show(text)} has {n} atoms counting its hydrogens ({heavy} heavy atoms and "
            f"{n - heavy} hydrogens); at most {max_atoms} atoms counting hydrogens are explained "
            f"(the model sees each hydrogen as an atom). Explain a part of it instead: the "
            f"fragment you want to study, written as its own SMILES.",
            "too_large",
        )
    num_bonds = molh.GetNumBonds()
    if num_bonds == 0:
        what = "is a single atom" if n == 1 else f"is {n} atoms"
        raise MoleculeError(
            f"{_show(text)} {what} with no bonds: there is nothing to explain (an explanation "
            f"is a set of bonds).",
            "no_bonds",
        )
    try:
        Chem.Kekulize(molh, clearAromaticFlags=True)
    except Exception as exc:  # sanitised input kekulizes; kept for safety
        raise MoleculeError(
            f"The aromatic system of {_show(text)} cannot be kekulized ({exc}).", "kekulize"
        ) from exc

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
            f"double and triple bonds are supported.",
            "bond_type",
        )

    warnings.extend(_charge_warnings(molh, heavy_atoms))  # AddHs keeps charges and radicals
    if n > LARGE_MOLECULE_ATOMS:
        warnings.append(
            f"{n} atoms including hydrogens: larger than all but "
            f"{LARGE_TRAINING_MOLECULES} of the {TRAINING_MOLECULES:,} training "
            f"molecules, so the prediction is less reliable."
        )

    import torch

    from gem_core.data.instances import Instance

    atom_one_hot, bond_one_hot = _one_hot_tables()
    columns.extend([_ATOM_COLUMN["H"]] * (n - n0))
    x = _one_hot(atom_one_hot, columns)
    bonds.sort()
    us, vs, labels, bond_idx = zip(*bonds)
    pairs = torch.from_numpy(np.array([us, vs], dtype=np.int64))
    edge_attr = _one_hot(bond_one_hot, labels)

    inst = Instance(
        x=x, pairs=pairs, y=-1, target=None, edge_attr=edge_attr, dataset=DATASET, index=-1
    )
    return MoleculeInstance(
        instance=inst,
        mol=molh,
        smiles=Chem.MolToSmiles(mol),
        input_smiles=text,
        warnings=warnings,
        name=name,
        pair_bond_index=list(bond_idx),
    )
