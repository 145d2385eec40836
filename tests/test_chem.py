"""SMILES -> dataset-like graph, dataset graph -> RDKit molecule, drawing, fragments, file parsing."""
from __future__ import annotations

import re
import time

import pytest
import torch
from rdkit import Chem
from rdkit.Chem.rdMolDescriptors import CalcMolFormula

from gem_core.chemistry.convert import (bond_index_of_pair, fragment_smarts, fragment_smiles,
                                        instance_to_mol, without_hydrogens)
from gem_core.chemistry.drawing import HIGHLIGHT_HEX, draw_molecule_svg
from gem_core.chemistry.smiles import (EXAMPLE_SMILES, MoleculeError, MoleculeInstance,
                                       largest_fragment, smiles_to_instance)
from gem_core.data.datasets import MUTAGENICITY_ATOMS
from gem_core.data.instances import Instance

from .conftest import requires_mutagenicity

NITROBENZENE = "O=[N+]([O-])c1ccccc1"
COL = {s: i for i, s in enumerate(MUTAGENICITY_ATOMS)}


def _symbol_counts(inst: Instance) -> dict[str, int]:
    counts = inst.x.sum(0).long().tolist()
    return {s: c for s, c in zip(MUTAGENICITY_ATOMS, counts) if c}


def _highlighted_bonds(svg: str, colour: str = HIGHLIGHT_HEX) -> set[tuple[int, int]]:
    """Display-atom pairs of the filled highlight paths of that colour in an RDKit SVG."""
    out = set()
    pattern = r"<path class='bond-\d+ atom-(\d+) atom-(\d+)' d='[^']*' style='([^']*)'"
    for a, b, style in re.findall(pattern, svg):
        if f"fill:{colour}" in style:
            out.add((min(int(a), int(b)), max(int(a), int(b))))
    return out


def _highlighted_atoms(svg: str, colour: str = HIGHLIGHT_HEX) -> set[int]:
    return {int(a) for a, style in re.findall(r"<ellipse [^>]*class='atom-(\d+)'\s*style='([^']*)'", svg)
            if f"fill:{colour}" in style}


# ----------------------------------------------------------------------------- smiles_to_instance

@pytest.mark.parametrize("smiles", [
    NITROBENZENE, "CCO", "[H]OC([H])([H])C", "C1=CC=CC=C1N", "OC(=O)c1ccccc1", "C#N",
    "[2H]C([2H])Cl", "FC(F)(F)C(Br)I", "C[N+](C)(C)C", *EXAMPLE_SMILES.values(),
])
def test_numbering_equals_rdkit_addhs(smiles):
    res = smiles_to_instance(smiles)
    ref = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert isinstance(res, MoleculeInstance)
    assert res.num_atoms == ref.GetNumAtoms() == res.instance.num_nodes
    assert [a.GetSymbol() for a in res.mol.GetAtoms()] == [a.GetSymbol() for a in ref.GetAtoms()]
    # node features: one-hot of that symbol
    assert torch.equal(res.instance.x.sum(1), torch.ones(res.num_atoms))
    assert [MUTAGENICITY_ATOMS[i] for i in res.instance.x.argmax(1).tolist()] == \
        [a.GetSymbol() for a in ref.GetAtoms()]
    ref_pairs = sorted(tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in ref.GetBonds())
    assert res.pairs == ref_pairs
    pairs = res.instance.pairs
    assert bool((pairs[0] < pairs[1]).all())
    # pair_bond_index points at the right RDKit bond
    for (u, v), bidx in zip(res.pairs, res.pair_bond_index):
        b = res.mol.GetBondWithIdx(bidx)
        assert {b.GetBeginAtomIdx(), b.GetEndAtomIdx()} == {u, v}
    assert res.instance.dataset == "mutagenicity" and res.instance.y == -1 and res.instance.target is None
    assert res.instance.edge_attr.shape == (pairs.size(1), 3)
    assert not any(b.GetIsAromatic() for b in res.mol.GetBonds())


def test_nitrobenzene_bonds_and_features():
    res = smiles_to_instance(NITROBENZENE)
    inst = res.instance
    assert _symbol_counts(inst) == {"C": 6, "O": 2, "H": 5, "N": 1}
    assert inst.x.shape == (14, 14)
    labels = dict(zip(res.pairs, inst.edge_attr.argmax(1).tolist()))
    sym = [a.GetSymbol() for a in res.mol.GetAtoms()]
    no = sorted(lab for (u, v), lab in labels.items() if {sym[u], sym[v]} == {"N", "O"})
    assert no == [0, 1]  # one N-O single, one N=O double, like the dataset
    cc = [lab for (u, v), lab in labels.items() if sym[u] == sym[v] == "C"]
    assert sorted(cc) == [0, 0, 0, 1, 1, 1]  # Kekulé ring
    assert inst.edge_attr.sum().item() == inst.num_pairs
    assert res.warnings == []  # the nitro charges are expected, no warning
    assert res.smiles == Chem.MolToSmiles(Chem.MolFromSmiles(NITROBENZENE))
    assert res.formula == "C6H5NO2"


def test_examples_all_convert_without_warnings():
    assert len(EXAMPLE_SMILES) >= 4
    for name, smiles in EXAMPLE_SMILES.items():
        res = smiles_to_instance(smiles)
        assert res.instance.num_pairs > 0, name
        assert res.warnings == [], (name, res.warnings)


def test_name_after_whitespace_and_stripping():
    res = smiles_to_instance("  CCO   ethanol absolute \n")
    assert res.input_smiles == "CCO" and res.name == "ethanol absolute"


def test_a_cxsmiles_extension_is_dropped_not_taken_as_the_name():
    res = smiles_to_instance("C[C@H](O)CC |&1:1| butan-2-ol")
    assert res.input_smiles == "C[C@H](O)CC" and res.name == "butan-2-ol"
    assert smiles_to_instance("CCO |$;;$|").name == ""


@pytest.mark.parametrize("smiles, kind, needles", [
    ("", "empty", ["No SMILES"]),
    ("   \n", "empty", ["No SMILES"]),
    ("C1CC", "parse", ["Could not parse", "'C1CC'", "unclosed ring"]),
    ("CC(C", "parse", ["Could not parse", "'CC(C'", "parentheses"]),
    ("C[Xx]C", "parse", ["Could not parse", "C[Xx]C"]),
    ("c1ccnc1", "kekulize", ["kekulized", "[nH]"]),
    ("CC(C)(C)(C)C", "valence", ["valence"]),
    ("C[Se]C", "element", ["Se", "Supported elements: " + ", ".join(MUTAGENICITY_ATOMS)]),
    ("[U](C)(C)", "element", ["U"]),
    ("CC(=O)[O-].[Na+]", "fragments", ["2 disconnected fragments", "largest fragment", "CC(=O)[O-]"]),
    ("CCO.O.O", "fragments", ["3 disconnected fragments"]),
    ("C" * 70, "too_large", ["212 atoms counting its hydrogens (70 heavy atoms and 142 "
                             "hydrogens)", "at most 200 atoms counting hydrogens",
                             "Explain a part of it"]),
    ("[Cl-]", "no_bonds", ["nothing to explain"]),
    ("[Na+]", "no_bonds", ["nothing to explain"]),
    ("O->[Na]", "bond_type", ["dative"]),
])
def test_errors_are_specific(smiles, kind, needles):
    with pytest.raises(MoleculeError) as info:
        smiles_to_instance(smiles)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.kind == kind, str(err)
    for needle in needles:
        assert needle in str(err), (needle, str(err))


def test_max_atoms_is_configurable():
    smiles_to_instance("C" * 70, max_atoms=300)
    with pytest.raises(MoleculeError, match="at most 10 atoms counting hydrogens"):
        smiles_to_instance("CCCC", max_atoms=10)  # 14 atoms with H


def test_largest_fragment_option_and_helper():
    salt = "CC(=O)[O-].[Na+]"
    assert largest_fragment(salt) == "CC(=O)[O-]"
    assert largest_fragment("Nc1ccccc1") == "Nc1ccccc1"
    res = smiles_to_instance(salt, salts="largest")
    assert res.input_smiles == "CC(=O)[O-]"
    assert _symbol_counts(res.instance) == {"C": 2, "O": 2, "H": 3}
    assert any("Kept the largest of 2 fragments" in w and "[Na+]" in w for w in res.warnings)
    assert any("Formal charge on O" in w for w in res.warnings)  # acetate keeps its charge
    ref = Chem.AddHs(Chem.MolFromSmiles(res.input_smiles))
    assert [a.GetSymbol() for a in res.mol.GetAtoms()] == [a.GetSymbol() for a in ref.GetAtoms()]
    with pytest.raises(MoleculeError, match="parse"):
        largest_fragment("C1CC.C")


def test_a_salt_read_whole_keeps_every_fragment_in_one_graph():
    """``salts="whole"``: the counter-ion is an atom of the graph (as the TU graphs keep it),
    and the numbering contract holds for the whole SMILES."""
    res = smiles_to_instance("CC(=O)[O-].[Na+]", salts="whole")
    assert res.input_smiles == "CC(=O)[O-].[Na+]"
    assert _symbol_counts(res.instance) == {"C": 2, "O": 2, "H": 3, "Na": 1}
    assert res.instance.num_pairs == 6  # the ion has no bond: it adds a node only
    assert any(w.startswith("Read whole: its 2 fragments") for w in res.warnings)
    ref = Chem.AddHs(Chem.MolFromSmiles(res.input_smiles))
    assert [a.GetSymbol() for a in res.mol.GetAtoms()] == [a.GetSymbol() for a in ref.GetAtoms()]
    assert smiles_to_instance("Nc1ccccc1", salts="whole").warnings == []
    with pytest.raises(MoleculeError) as err:  # ions alone: nothing to explain
        smiles_to_instance("[Na+].[Cl-]", salts="whole")
    assert err.value.kind == "no_bonds" and "is 2 atoms with no bonds" in str(err.value)
    with pytest.raises(ValueError, match="salts must be one of"):
        smiles_to_instance("CCO", salts="keep")


def test_charge_and_radical_warnings():
    assert any("Formal charge on N1 (+1)" in w for w in smiles_to_instance("C[N+](C)(C)C").warnings)
    assert smiles_to_instance("[N-]=[N+]=Nc1ccccc1").warnings == []  # azide: dataset form N=N=N
    assert any("Radical" in w for w in smiles_to_instance("C[CH2]").warnings)
    big = smiles_to_instance("C" * 40)  # 122 atoms with H
    assert any("larger than all but 27 of the 3,469 training molecules" in w
               for w in big.warnings)


# ----------------------------------------------------------------------------- instance_to_mol

@pytest.mark.parametrize("smiles", [
    NITROBENZENE, "CCO", "C#CC(=O)Cl", "Nc1ccc2cc3ccccc3cc2c1", "[N-]=[N+]=Nc1ccccc1",
    "OP(=O)(O)OCC", "CS(=O)(=O)c1ccccc1", *EXAMPLE_SMILES.values(),
])
def test_round_trip_smiles_instance_mol(smiles):
    res = smiles_to_instance(smiles)
    mol = instance_to_mol(res.instance)
    assert mol.GetNumAtoms() == res.num_atoms
    assert CalcMolFormula(mol) == res.formula == CalcMolFormula(Chem.AddHs(Chem.MolFromSmiles(smiles)))
    # bond p of the rebuilt molecule is pair p of the instance
    for p, (u, v) in enumerate(res.pairs):
        b = mol.GetBondWithIdx(p)
        assert {b.GetBeginAtomIdx(), b.GetEndAtomIdx()} == {u, v}
    assert all(a.GetNoImplicit() for a in mol.GetAtoms())
    # nitro / azide charges restored: the same canonical SMILES as the input
    assert Chem.MolToSmiles(Chem.RemoveHs(mol, sanitize=False)) == res.smiles
    assert instance_to_mol(res).GetNumBonds() == mol.GetNumBonds()  # MoleculeInstance accepted


def test_instance_to_mol_dataset_style_nitro():
    res = smiles_to_instance(NITROBENZENE)
    plain = instance_to_mol(res.instance, restore_charges=False)
    assert all(a.GetFormalCharge() == 0 for a in plain.GetAtoms())  # dataset form: neutral N=O + N-O
    assert CalcMolFormula(plain) == "C6H5NO2"
    charged = instance_to_mol(res.instance)
    assert sorted(a.GetFormalCharge() for a in charged.GetAtoms() if a.GetFormalCharge()) == [-1, 1]


def test_instance_to_mol_rejects_wrong_features():
    inst = Instance(x=torch.ones(2, 5), pairs=torch.tensor([[0], [1]]), y=0)
    with pytest.raises(ValueError, match="one-hot"):
        instance_to_mol(inst)


@requires_mutagenicity
def test_every_dataset_graph_converts():
    from gem_core.data.datasets import load_dataset

    ds = load_dataset("mutagenicity")
    assert len(ds.graphs) == 4337
    start = time.perf_counter()
    nitro = Chem.MolFromSmarts("[#7+](=[#8])-[#8-]")
    n_nitro = 0
    for g in ds.graphs:
        ei = g.edge_index
        keep = ei[0] < ei[1]  # each undirected bond once (both directions are stored)
        inst = Instance(x=g.x, pairs=ei[:, keep], y=int(g.y), edge_attr=g.edge_attr[keep],
                        dataset="mutagenicity")
        mol = instance_to_mol(inst)
        assert mol.GetNumAtoms() == g.num_nodes
        assert mol.GetNumBonds() == inst.num_pairs
        n_nitro += len(mol.GetSubstructMatches(nitro))
    elapsed = time.perf_counter() - start
    assert n_nitro >= 889  # the dataset's N=O + N-O nitro groups come back as [N+](=O)[O-]
    assert elapsed < 30, f"converting the dataset took {elapsed:.1f} s"


# ----------------------------------------------------------------------------- pairs, fragments

def test_bond_index_of_pair():
    res = smiles_to_instance(NITROBENZENE)
    mapping = bond_index_of_pair(res.mol)
    assert len(mapping) == res.mol.GetNumBonds()
    for (i, j), b in mapping.items():
        assert i < j
        assert res.mol.GetBondBetweenAtoms(i, j).GetIdx() == b
    assert [mapping[p] for p in res.pairs] == res.pair_bond_index


def test_fragment_smarts_nitro_and_edge_cases():
    res = smiles_to_instance(NITROBENZENE)  # atoms: O0 N1 O2 C3 ...
    nitro = [(0, 1), (2, 1)]
    smarts = fragment_smarts(res.mol, nitro)
    assert smarts == "[#8]=[#7+]-[#8-]"
    assert Chem.MolFromSmarts(smarts) is not None
    assert res.mol.HasSubstructMatch(Chem.MolFromSmarts(smarts))
    assert fragment_smarts(res.mol, nitro, kind="smiles") == "O=[N+][O-]"
    # the dataset's neutral nitro
    assert fragment_smarts(instance_to_mol(res.instance, restore_charges=False), nitro) == "[#8]=[#7]-[#8]"
    # a [2, P] tensor works too
    assert fragment_smarts(res.mol, torch.tensor([[0, 1], [1, 2]])) == smarts
    # disconnected selection: nitro + a ring C-C bond far from it
    sym = [a.GetSymbol() for a in res.mol.GetAtoms()]
    ring = next((u, v) for u, v in res.pairs if u >= 4 and v >= 4 and sym[u] == sym[v] == "C")
    two = fragment_smarts(res.mol, nitro + [ring])
    assert two.count(".") == 1 and "[#8]=[#7+]-[#8-]" in two.split(".")
    assert fragment_smarts(res.mol, []) == ""
    assert fragment_smarts(res.mol, torch.zeros(2, 0, dtype=torch.long)) == ""
    with pytest.raises(ValueError, match="not bonded"):
        fragment_smarts(res.mol, [(0, 2)])


@pytest.mark.parametrize("smiles, keep, text", [
    # the message shows the first six fragments; the largest may come after them
    ("O.N.Cl.Br.I.F.S.CCC", False, "has 8 disconnected fragments (O, N, Cl, Br, I, F, ...): a salt "
     "or mixture. The model explains one connected molecule: keep the largest fragment, CCC, "
     "or read the salt whole"),
    ("CCC.O.N.Cl.Br.I.F.S", False, "has 8 disconnected fragments (CCC, O, N, Cl, Br, I, ...)"),
    ("O.N.Cl.Br.I.F.S.CCC", True, "Kept the largest of 8 fragments (CCC); removed O, N, Cl, Br, I, F, ...."),
    ("CCC.O.N.Cl.Br.I.F.S", True, "Kept the largest of 8 fragments (CCC); removed O, N, Cl, Br, I, F, ...."),
    ("O.N.Cl.Br.I.F.CCC", True, "Kept the largest of 7 fragments (CCC); removed O, N, Cl, Br, I, F."),
])
def test_many_fragments_message_and_warning(smiles, keep, text):
    if keep:
        res = smiles_to_instance(smiles, salts="largest")
        assert res.input_smiles == "CCC" and res.warnings == [text]
    else:
        with pytest.raises(MoleculeError) as err:
            smiles_to_instance(smiles)
        assert err.value.kind == "fragments" and text in str(err.value)


def _reference_fragment_smiles(mol: Chem.Mol, pairs) -> str:
    """fragment_smiles written plainly: tag atoms, drop hydrogens, keep the selected heavy atoms
    and their neighbours (as ``*``), delete everything else atom by atom."""
    m = Chem.Mol(mol)
    for atom in m.GetAtoms():
        atom.SetIntProp("orig", atom.GetIdx())
    heavy = without_hydrogens(m, keep=set())
    new_of_orig = {a.GetIntProp("orig"): a.GetIdx() for a in heavy.GetAtoms()}
    atoms = {new_of_orig[i] for pair in pairs for i in pair if i in new_of_orig}
    rw = Chem.RWMol(heavy)
    for a, b in pairs:  # validates like the engine does
        if mol.GetBondBetweenAtoms(int(a), int(b)) is None:
            raise ValueError(f"atoms {a} and {b} are not bonded")
    outside = {n.GetIdx() for a in atoms for n in rw.GetAtomWithIdx(a).GetNeighbors()} - atoms
    for n in outside:
        star = rw.GetAtomWithIdx(n)
        star.SetAtomicNum(0)
        star.SetFormalCharge(0)
        star.SetNumExplicitHs(0)
        star.SetNoImplicit(True)
        star.SetIsotope(0)
    for bond in list(rw.GetBonds()):
        if bond.GetBeginAtomIdx() in outside and bond.GetEndAtomIdx() in outside:
            rw.RemoveBond(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
    for idx in sorted(set(range(rw.GetNumAtoms())) - atoms - outside, reverse=True):
        rw.RemoveAtom(idx)
    if not atoms:
        raise ValueError("the selected bonds touch no heavy atom")
    return Chem.MolFragmentToSmiles(rw, atomsToUse=list(range(rw.GetNumAtoms())),
                                    canonical=True)


def _same_smiles(a: str, b: str) -> bool:
    """Two SMILES of the same labelled graph (RDKit's canonical order breaks ties between
    attachment points differently in a cut-out molecule, so the graphs are compared)."""
    import networkx as nx

    def graph(text: str) -> "nx.Graph":
        m = Chem.MolFromSmiles(text, sanitize=False)  # fragments cut aromatic rings
        g = nx.Graph()
        for atom in m.GetAtoms():
            g.add_node(atom.GetIdx(), label=(atom.GetAtomicNum(), atom.GetIsAromatic(),
                                             atom.GetFormalCharge(), atom.GetNumExplicitHs()))
        for bond in m.GetBonds():
            g.add_edge(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx(), label=str(bond.GetBondType()))
        return g

    same = lambda x, y: x["label"] == y["label"]  # noqa: E731
    return a == b or nx.is_isomorphic(graph(a), graph(b), node_match=same, edge_match=same)


def test_fragment_smiles_heavy_atoms_and_hydrogen_only_selections():
    res = smiles_to_instance("OCC")  # O0 C1 C2, H3 on O, H4 H5 on C1, H6 H7 H8 on C2
    mol = res.mol
    # an O-H bond reads as its heavy atom, "*" where the rest of the molecule attaches
    assert fragment_smiles(mol, [(0, 3)]) == "*O"
    assert fragment_smiles(mol, [(1, 4)]) == "*C*"
    # only C-H bonds: their heavy atoms, with the bonds between them
    assert fragment_smiles(mol, [(1, 4), (2, 6)]) == "*CC"
    assert fragment_smiles(mol, [(0, 1)]) == "*CO"
    # every bond between the highlighted atoms: part of the molecule, never "C.CO"
    assert fragment_smiles(mol, [(0, 1), (2, 6)]) == "CCO"
    assert fragment_smiles(mol, [(1, 2), (0, 3)]) == "CCO"
    assert fragment_smiles(mol, [(3, 0), (2, 1)]) == "CCO"  # either order
    assert fragment_smiles(mol, torch.tensor([[1, 0], [2, 3]])) == "CCO"
    hexene = smiles_to_instance("CCCCC=C")  # C-H bonds of a chain read as the chain
    c_h = [p for p in hexene.instance.pairs.t().tolist()
           if 1 in {hexene.mol.GetAtomWithIdx(a).GetAtomicNum() for a in p}]
    chain = [p for p in c_h if 0 in p or 1 in p or 2 in p or 3 in p]
    assert fragment_smiles(hexene.mol, chain) == "*CCCC"
    assert "." not in fragment_smiles(hexene.mol, chain)
    assert fragment_smiles(mol, []) == ""
    with pytest.raises(ValueError, match="not bonded"):
        fragment_smiles(mol, [(0, 2)])
    with pytest.raises(ValueError, match="not bonded"):
        fragment_smiles(mol, [(0, 99)])
    assert mol.GetNumAtoms() == 9  # the input is not modified
    nitro = smiles_to_instance("O=[N+]([O-])c1ccccc1N")  # ..., N9 with H14 H15
    assert fragment_smiles(nitro.mol, [(0, 1), (1, 2)]) == "*[N+](=O)[O-]"
    assert fragment_smiles(nitro.mol, [(9, 14), (9, 15)]) == "*N"
    assert fragment_smiles(nitro.mol, [(0, 1), (1, 2), (9, 14)]) == "*N.*[N+](=O)[O-]"
    assert fragment_smiles(instance_to_mol(nitro.instance, restore_charges=False),
                           [(0, 1), (1, 2)]) == "*N([O])=O"


@pytest.mark.parametrize("smiles", [
    "OCC", "O=[N+]([O-])c1ccccc1N", "[2H]C([2H])Cl", "C[N+](C)(C)C", "[H][H]",
    "B1[H]B[H]1", "c1ccc2c(c1)cc1ccc3cccc4ccc2c1c34", *EXAMPLE_SMILES.values(),
])
def test_fragment_smiles_equals_plain_hydrogen_removal(smiles):
    import random

    base = Chem.MolFromSmiles(smiles, sanitize=False)
    try:
        Chem.SanitizeMol(base)
    except Chem.MolSanitizeException:  # the bridging hydrogens of diborane
        base.UpdatePropertyCache(strict=False)
    mols = [Chem.AddHs(base), base]
    if all(a.GetSymbol() in COL for a in base.GetAtoms()) and base.GetNumAtoms() > 1:
        res = smiles_to_instance(smiles)
        mols += [res.mol, instance_to_mol(res.instance),  # dataset style: hydrogens interleaved
                 instance_to_mol(res.instance, restore_charges=False)]
    rng = random.Random(0)
    for mol in mols:
        pairs = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()]
        hydrogen = [p for p in pairs if 1 in (mol.GetAtomWithIdx(p[0]).GetAtomicNum(),
                                              mol.GetAtomWithIdx(p[1]).GetAtomicNum())]
        selections = [pairs, hydrogen]
        selections += [rng.sample(pairs, rng.randint(1, min(8, len(pairs)))) for _ in range(30)]
        selections += [rng.sample(hydrogen, rng.randint(1, min(4, len(hydrogen))))
                       for _ in range(10) if hydrogen]
        for sel in selections:
            if not sel:
                continue
            try:
                want = _reference_fragment_smiles(mol, sel)
            except ValueError as exc:  # e.g. H2: no heavy atom to write
                with pytest.raises(ValueError, match=str(exc)):
                    fragment_smiles(mol, sel)
                continue
            # the same fragment; canonical ties may be broken differently in a cut-out molecule
            assert _same_smiles(fragment_smiles(mol, sel), want), (smiles, sel)


# ----------------------------------------------------------------------------- drawing

def test_svg_highlights_and_is_offline():
    res = smiles_to_instance(NITROBENZENE)
    plain = draw_molecule_svg(res.mol)
    assert plain.lstrip().startswith("<?xml") and "</svg>" in plain
    assert HIGHLIGHT_HEX not in plain
    svg = draw_molecule_svg(res.mol, [(0, 1), (1, 2)])
    assert HIGHLIGHT_HEX in svg
    assert _highlighted_bonds(svg) == {(0, 1), (1, 2)}
    assert {0, 1, 2} <= _highlighted_atoms(svg)
    # nothing that a browser would fetch
    assert "href" not in svg and "@import" not in svg and "url(" not in svg
    assert svg == draw_molecule_svg(res.mol, [(0, 1), (1, 2)])  # deterministic layout
    assert 'width=\'300px\'' in draw_molecule_svg(res.mol, size=(300, 200))


def test_svg_scores_shade_bonds():
    res = smiles_to_instance(NITROBENZENE)
    svg = draw_molecule_svg(res.mol, [(0, 1), (1, 2)], scores=[1.0, 0.1])
    assert _highlighted_bonds(svg) == {(0, 1)}  # only the top bond gets the full colour
    fills = set(re.findall(r"<path class='bond-\d+ atom-1 atom-2' d='[^']*' style='fill:(#[0-9A-F]{6})", svg))
    assert len(fills) == 1 and fills != {HIGHLIGHT_HEX}
    lighter = fills.pop()
    assert all(int(lighter[k:k + 2], 16) >= int(HIGHLIGHT_HEX[k:k + 2], 16) for k in (1, 3, 5))
    # a mapping of scores works as well, in either pair orientation
    svg2 = draw_molecule_svg(res.mol, [(0, 1), (1, 2)], scores={(1, 0): 0.2, (1, 2): 0.9})
    assert _highlighted_bonds(svg2) == {(1, 2)}
    with pytest.raises(ValueError, match="scores"):
        draw_molecule_svg(res.mol, [(0, 1)], scores=[1.0, 2.0])
    with pytest.raises(ValueError, match="not bonded"):
        draw_molecule_svg(res.mol, [(0, 5)])


def _interleaved_nitromethane() -> Chem.Mol:
    """Nitromethane numbered like a dataset graph, hydrogens between heavy atoms: H0 H1 C2 H3 N4 O5 O6."""
    symbols = ["H", "H", "C", "H", "N", "O", "O"]
    x = torch.zeros(len(symbols), 14)
    x[torch.arange(len(symbols)), torch.tensor([COL[s] for s in symbols])] = 1
    pairs = torch.tensor([[0, 1, 2, 2, 4, 4], [2, 2, 3, 4, 5, 6]])
    edge_attr = torch.zeros(6, 3)
    edge_attr[torch.arange(6), torch.tensor([0, 0, 0, 0, 1, 0])] = 1
    return instance_to_mol(Instance(x=x, pairs=pairs, y=0, edge_attr=edge_attr))


def test_hide_hydrogens_maps_highlights():
    mol = _interleaved_nitromethane()
    assert CalcMolFormula(mol) == "CH3NO2"
    # with hydrogens: original numbering
    svg = draw_molecule_svg(mol, [(4, 5), (0, 2)])
    assert _highlighted_bonds(svg) == {(4, 5), (0, 2)}
    # without: the hydrogen of a highlighted bond stays drawn (H0), the others go, so the display
    # atoms are H0 C1 N2 O3 O4; H0-C2 -> (0, 1) and N4=O5 -> (2, 3): every explanation bond shows
    hidden = draw_molecule_svg(mol, [(4, 5), (0, 2)], hide_hydrogens=True)
    assert _highlighted_bonds(hidden) == {(0, 1), (2, 3)}
    assert _highlighted_atoms(hidden) == {0, 1, 2, 3}
    # with no hydrogen highlighted all of them go: display atoms C0 N1 O2 O3; C-N (2, 4) -> (0, 1)
    assert _highlighted_bonds(draw_molecule_svg(mol, [(2, 4)], hide_hydrogens=True)) == {(0, 1)}
    # atom-index notes still work when hydrogens are hidden
    assert draw_molecule_svg(mol, hide_hydrogens=True, atom_indices=True) != \
        draw_molecule_svg(mol, hide_hydrogens=True)


def test_hide_hydrogens_on_user_molecule():
    res = smiles_to_instance(EXAMPLE_SMILES["2-Nitrofluorene (nitro-aromatic)"])
    heavy = res.num_heavy_atoms
    h_pair = next(p for p in res.pairs if p[1] >= heavy)  # a bond to a hydrogen
    svg = draw_molecule_svg(res.mol, [(0, 1), h_pair], hide_hydrogens=True)
    # AddHs puts H last: heavy indices are unchanged, and the one kept hydrogen comes right after
    assert _highlighted_bonds(svg) == {(0, 1), (h_pair[0], heavy)}
    assert h_pair[0] in _highlighted_atoms(svg)


def test_hidden_hydrogens_keep_every_explanation_bond_drawn():
    """With hydrogens hidden, the drawing still highlights exactly the K explanation bonds."""
    res = smiles_to_instance("Cc1ccc(cc1)[N+](=O)[O-]")  # 4-nitrotoluene: 7 of 17 bonds to H
    pairs = [tuple(p) for p in res.instance.pairs.t().tolist()]
    to_h = [p for p in pairs if res.mol.GetAtomWithIdx(p[1]).GetSymbol() == "H"]
    heavy = [p for p in pairs if p not in to_h]
    for chosen in (to_h[:3], heavy[:2] + to_h[:3], heavy[:5] + to_h[-3:], pairs):
        svg = draw_molecule_svg(res.mol, chosen, hide_hydrogens=True)
        assert len(_highlighted_bonds(svg)) == len(chosen)


def test_a_small_molecule_is_drawn_at_the_scale_of_a_mid_sized_one():
    """RDKit scales a drawing to fill its canvas: ethane's one bond used to be drawn 2.4 times as
    long as a bond of 2-nitrofluorene, a blot of highlight. With the bond-length cap it is not."""
    import re

    def longest_bond_stroke(smiles: str) -> float:
        svg = draw_molecule_svg(smiles_to_instance(smiles).mol)
        strokes = re.findall(r"<path class='bond-\d+ [^']*' d='M ([\d.]+),([\d.]+) "
                             r"L ([\d.]+),([\d.]+)'", svg)
        return max(((float(x1) - float(x2)) ** 2 + (float(y1) - float(y2)) ** 2) ** 0.5
                   for x1, y1, x2, y2 in strokes)

    ethane = longest_bond_stroke("CC")
    fluorene = longest_bond_stroke("O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2")
    assert ethane <= 1.3 * fluorene, (ethane, fluorene)


def test_toxicophores_never_hide_the_explanation_on_a_polycyclic_molecule():
    """Issue 27 item 3: benzo[a]pyrene's rings are all outlined as toxicophore, yet every bond in
    the drawing keeps the explanation's colour only; the toxicophores are atom halos."""
    import re

    from gem_core.chemistry.drawing import HALO_HEX, draw_molecule_svg
    from gem_core.chemistry.smiles import smiles_to_instance

    mol = smiles_to_instance("c1ccc2c(c1)cc1ccc3cccc4ccc2c1c34")  # benzo[a]pyrene
    heavy = [(int(u), int(v)) for u, v in mol.instance.pairs.t().tolist()
             if mol.mol.GetAtomWithIdx(u).GetSymbol() != "H"
             and mol.mol.GetAtomWithIdx(v).GetSymbol() != "H"]
    explained = heavy[:5]
    svg = draw_molecule_svg(mol.mol, explained, outline_pairs=heavy).upper()
    bond_paths = re.findall(r"<PATH CLASS='BOND-[^>]*>", svg)
    assert bond_paths and not any(HALO_HEX[1:] in p for p in bond_paths)  # no bond in halo colour
    assert any("E8590C" in p for p in bond_paths)  # the strongest explanation bond, in its colour
    assert HALO_HEX[1:] in svg  # the toxicophore atoms' halos
