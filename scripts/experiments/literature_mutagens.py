"""Known Ames mutagens from the literature, outside the data set: do the explanations find their
toxicophores? (issue 14: "explanations a chemist can trust on real molecules")

For each compound of :data:`LITERATURE` (textbook Ames-positive mutagens; each holds at least one
Kazius et al. 2005 toxicophore), the script

* drops it when it is one of the 4,337 Mutagenicity graphs (compared as canonical heavy-atom
  SMILES of the rebuilt graphs), so only molecules no model or explainer was fitted on remain;
* predicts it with each target (``paper``, ``strong``) and explains it with every method;
* reports, per target and method, over the molecules the target calls mutagens: the bond AUC of
  the scores against the toxicophore bonds and the toxicophore recall in the top 8
  (:func:`gem_core.chemistry.toxicophores.toxicophore_benchmark`, the same measure as ``reproduce``), the
  share of molecules whose top-5 bonds touch a toxicophore, and the target's median P(mutagen) on
  the top-5 explanation alone (does the explanation carry the prediction?).

Usage (about 1 minute on 2 CPU cores):

    GEM_DATA_ROOT=../shared/data/TUDataset python scripts/experiments/literature_mutagens.py
"""
from __future__ import annotations

import argparse
import statistics

import torch
from rdkit import Chem, rdBase

from gem_core.chemistry.convert import instance_to_mol
from gem_core.chemistry.smiles import smiles_to_instance
from gem_core.data.datasets import load_dataset
from gem_core.models.predict import predict_proba
from gem_core.data.ranking import topk_mask
from gem_core.explainers import METHODS
from gem_core.explainers.registry import title
from gem_core.data.instances import dataset_instances
from gem_core.service.molecules import explain_molecules, molecule_model
from gem_core.chemistry.toxicophores import (match_toxicophores, toxicophore_benchmark,
                                             toxicophore_bond_mask)

MUTAGEN = 0  # Mutagenicity's label of mutagens

#: (name, SMILES): Ames-positive compounds of the toxicology literature (IARC / NTP classics)
LITERATURE: tuple[tuple[str, str], ...] = (
    # aromatic nitro (nitroarenes, nitrofurans, nitroimidazoles)
    ("2-nitrofluorene", "O=[N+]([O-])c1ccc2c(c1)Cc1ccccc1-2"),
    ("1-nitropyrene", "O=[N+]([O-])c1ccc2ccc3cccc4ccc1c2c34"),
    ("2,4-dinitrotoluene", "Cc1ccc([N+](=O)[O-])cc1[N+](=O)[O-]"),
    ("2,6-dinitrotoluene", "Cc1c(cccc1[N+](=O)[O-])[N+](=O)[O-]"),
    ("1,3-dinitrobenzene", "O=[N+]([O-])c1cccc([N+](=O)[O-])c1"),
    ("4-nitrobiphenyl", "O=[N+]([O-])c1ccc(-c2ccccc2)cc1"),
    ("1-nitronaphthalene", "O=[N+]([O-])c1cccc2ccccc12"),
    ("2-nitronaphthalene", "O=[N+]([O-])c1ccc2ccccc2c1"),
    ("2-nitroanthracene", "O=[N+]([O-])c1ccc2cc3ccccc3cc2c1"),
    ("nitrofurantoin", "O=C1CN(/N=C/c2ccc([N+](=O)[O-])o2)C(=O)N1"),
    ("nitrofurazone", "NC(=O)N/N=C/c1ccc([N+](=O)[O-])o1"),
    ("furylfuramide (AF-2)", "NC(=O)/C(=C/c1ccc([N+](=O)[O-])o1)c1ccco1"),
    ("metronidazole", "Cc1ncc([N+](=O)[O-])n1CCO"),
    ("niridazole", "O=C1NCCN1c1ncc([N+](=O)[O-])s1"),
    # aromatic amines (incl. heterocyclic amines of cooked meat)
    ("2-aminoanthracene", "Nc1ccc2cc3ccccc3cc2c1"),
    ("2-naphthylamine", "Nc1ccc2ccccc2c1"),
    ("4-aminobiphenyl", "Nc1ccc(-c2ccccc2)cc1"),
    ("benzidine", "Nc1ccc(-c2ccc(N)cc2)cc1"),
    ("3,3'-dichlorobenzidine", "Nc1ccc(-c2ccc(N)c(Cl)c2)cc1Cl"),
    ("2,4-diaminotoluene", "Cc1ccc(N)cc1N"),
    ("2,4-diaminoanisole", "COc1ccc(N)cc1N"),
    ("4-chloro-o-phenylenediamine", "Nc1ccc(Cl)cc1N"),
    ("4,4'-methylenedianiline", "Nc1ccc(Cc2ccc(N)cc2)cc1"),
    ("1-aminopyrene", "Nc1ccc2ccc3cccc4ccc1c2c34"),
    ("2-aminofluorene", "Nc1ccc2c(c1)Cc1ccccc1-2"),
    ("IQ", "Cn1c(N)nc2c1ccc1ncccc12"),
    ("MeIQx", "Cc1cnc2c(n1)ccc1c2nc(N)n1C"),
    ("PhIP", "Cn1c(N)nc2ncc(-c3ccccc3)cc21"),
    ("Trp-P-1", "Cc1c(N)nc(C)c2[nH]c3ccccc3c12"),
    ("N-hydroxy-2-aminofluorene", "ONc1ccc2c(c1)Cc1ccccc1-2"),
    # aromatic azo
    ("4-aminoazobenzene", "Nc1ccc(/N=N/c2ccccc2)cc1"),
    ("4-(dimethylamino)azobenzene", "CN(C)c1ccc(/N=N/c2ccccc2)cc1"),
    ("o-aminoazotoluene", "Cc1ccccc1/N=N/c1ccc(N)c(C)c1"),
    ("Sudan I", "Oc1ccc2ccccc2c1/N=N/c1ccccc1"),
    # epoxides, aziridines
    ("styrene oxide", "C1OC1c1ccccc1"),
    ("glycidol", "OCC1CO1"),
    ("epichlorohydrin", "ClCC1CO1"),
    ("propylene oxide", "CC1CO1"),
    ("1,2-epoxybutane", "CCC1CO1"),
    ("diepoxybutane", "C1OC1C1CO1"),
    ("glycidaldehyde", "O=CC1CO1"),
    ("2-methylaziridine", "CC1CN1"),
    ("triethylenemelamine", "C1CN1c1nc(N2CC2)nc(N2CC2)n1"),
    ("thiotepa", "S=P(N1CC1)(N1CC1)N1CC1"),
    # N-nitroso
    ("N-nitrosodimethylamine", "CN(C)N=O"),
    ("N-nitrosodiethylamine", "CCN(CC)N=O"),
    ("N-nitrosodipropylamine", "CCCN(CCC)N=O"),
    ("N-nitrosopyrrolidine", "O=NN1CCCC1"),
    ("N-nitrosopiperidine", "O=NN1CCCCC1"),
    ("N-nitrosomorpholine", "O=NN1CCOCC1"),
    ("N-methyl-N-nitrosourea", "CN(N=O)C(N)=O"),
    ("N-ethyl-N-nitrosourea", "CCN(N=O)C(N)=O"),
    ("MNNG", "CN(N=O)C(=N)N[N+](=O)[O-]"),
    ("N-nitrosonornicotine", "O=NN1CCCC1c1cccnc1"),
    ("NNK", "CN(N=O)CCCC(=O)c1cccnc1"),
    # aliphatic halides, mustards
    ("1,2-dibromoethane", "BrCCBr"),
    ("1,2-dichloroethane", "ClCCCl"),
    ("1,2-dibromo-3-chloropropane", "ClCC(Br)CBr"),
    ("benzyl chloride", "ClCc1ccccc1"),
    ("bis(chloromethyl) ether", "ClCOCCl"),
    ("sulfur mustard", "ClCCSCCCl"),
    ("mechlorethamine", "CN(CCCl)CCCl"),
    ("chlorambucil", "OC(=O)CCCc1ccc(N(CCCl)CCCl)cc1"),
    ("melphalan", "NC(Cc1ccc(N(CCCl)CCCl)cc1)C(=O)O"),
    # alkyl sulfonates and sulfates
    ("ethyl methanesulfonate", "CCOS(C)(=O)=O"),
    ("methyl methanesulfonate", "COS(C)(=O)=O"),
    ("busulfan", "CS(=O)(=O)OCCCCOS(C)(=O)=O"),
    ("dimethyl sulfate", "COS(=O)(=O)OC"),
    # polycyclic aromatic hydrocarbons
    ("benzo[a]pyrene", "c1ccc2c(c1)cc1ccc3cccc4ccc2c1c34"),
    ("benz[a]anthracene", "c1ccc2cc3c(ccc4ccccc43)cc2c1"),
    ("dibenz[a,h]anthracene", "c1ccc2c(c1)ccc1cc3c(ccc4ccccc43)cc12"),
    ("7,12-dimethylbenz[a]anthracene", "Cc1c2ccccc2c(C)c2c1ccc1ccccc12"),
    ("5-methylchrysene", "Cc1cc2ccccc2c2ccc3ccccc3c12"),
    # others of the Kazius list
    ("beta-propiolactone", "O=C1CCO1"),
    ("acrolein", "C=CC=O"),
    ("crotonaldehyde", "C/C=C/C=O"),
    ("1,2-dimethylhydrazine", "CNNC"),
    ("phenylhydrazine", "NNc1ccccc1"),
    ("dacarbazine", "CN(C)/N=N/c1[nH]cnc1C(N)=O"),
    ("azaserine", "[N-]=[N+]=CC(=O)OCC(N)C(=O)O"),
    ("N-nitrodimethylamine", "CN(C)[N+](=O)[O-]"),
)


def canonical_heavy(mol: Chem.Mol) -> str:
    """Heavy-atom canonical SMILES, charges dropped (the TU graphs carry none)."""
    m = Chem.RWMol(mol)
    for atom in m.GetAtoms():
        atom.SetFormalCharge(0)
        atom.SetNoImplicit(False)
        atom.SetNumRadicalElectrons(0)
    m = Chem.RemoveHs(m, sanitize=False)
    Chem.SanitizeMol(m, catchErrors=True)
    return Chem.MolToSmiles(m, canonical=True)


def data_set_smiles() -> set[str]:
    ds = load_dataset("mutagenicity")
    out = set()
    with rdBase.BlockLogs():
        for inst in dataset_instances(ds, list(range(len(ds.graphs)))):
            out.add(canonical_heavy(instance_to_mol(inst)))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", nargs="+", default=["paper", "strong"])
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    torch.manual_seed(0)

    known = data_set_smiles()
    molecules, names, dropped, unmatched, refused = [], [], [], [], []
    with rdBase.BlockLogs():
        for name, smi in LITERATURE:
            try:
                mol = smiles_to_instance(smi)
            except ValueError as exc:  # MoleculeError: the app's message
                refused.append(f"{name} ({exc})")
                continue
            if canonical_heavy(mol.mol) in known:
                dropped.append(name)
            elif not match_toxicophores(mol.mol):
                unmatched.append(name)
            else:
                molecules.append(mol)
                names.append(name)
    print(f"{len(LITERATURE)} literature mutagens; in the data set, left out ({len(dropped)}): "
          f"{', '.join(dropped) or 'none'}")
    print(f"no encoded toxicophore, left out ({len(unmatched)}): {', '.join(unmatched) or 'none'}")
    print(f"refused by the parser ({len(refused)}): {'; '.join(refused) or 'none'}")
    print(f"kept ({len(molecules)}): {', '.join(names)}")

    methods = [m for m in METHODS if m != "distilled"]  # no true label for new molecules
    for target in args.targets:
        wb = molecule_model(args.device, target=target)
        results = explain_molecules(molecules, methods, device=args.device, model=wb)
        preds = torch.tensor([r.label for r in results])
        called = [i for i, r in enumerate(results) if r.label == MUTAGEN]
        print(f"\n{target} target: {len(called)} of {len(results)} called mutagens "
              f"(missed: {', '.join(n for n, r in zip(names, results) if r.label != MUTAGEN) or 'none'})")
        tox = toxicophore_benchmark([(m.mol, m.instance.pairs) for m in molecules],
                                    {m: [r.scores[m] for r in results] for m in methods}, preds)
        print(f"{'method':<38}{'AUC':>7}{'recall@8':>10}{'top-5 touches':>15}{'P(mutagen | top-5)':>20}")
        instances = [molecules[i].instance for i in called]
        for m in methods:
            t = tox["methods"][m]
            touches, p_top5 = [], []
            masks = [topk_mask(results[i].scores[m], 5) for i in called]
            for i, mask in zip(called, masks):
                tox_mask = toxicophore_bond_mask(molecules[i].mol, molecules[i].instance.pairs)
                touches.append(bool((mask & tox_mask).any()))
            if instances:
                p_top5 = predict_proba(wb.black_box, instances, masks)[:, MUTAGEN].tolist()
            share = sum(touches) / len(touches) if touches else float("nan")
            med = statistics.median(p_top5) if p_top5 else float("nan")
            print(f"{title(m):<38}{t['auc']:>7.3f}{t['recall_at_8']:>10.3f}{share:>15.0%}{med:>20.2f}")
        print(f"{'(uniformly random, expected)':<38}{0.5:>7.3f}{tox['random_recall_at_8']:>10.3f}")


if __name__ == "__main__":
    main()
