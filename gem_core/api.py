"""The engine's public API for front-ends (the Streamlit app, notebooks): one import place.

The app reaches the engine through this module and the :class:`Workbench` session it hands out;
everything else in ``gem_core`` is internal and may move. Names load lazily (PEP 562), so
importing this module costs nothing until a name is used: a page pays only for what it draws.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # The session: one dataset, one target model and the registry's explainers
    "Workbench": "gem_core.service.session",
    "forget_explainer": "gem_core.service.session",
    "workbench": "gem_core.service.session",
    # Datasets, targets and instances
    "DATASETS": "gem_core.data.config",
    "DEFAULT_TARGET": "gem_core.data.config",
    "SALT_RULES": "gem_core.data.config",
    "molecule_default_target": "gem_core.data.config",
    "DatasetSpec": "gem_core.data.config",
    "get_spec": "gem_core.data.config",
    "molecule_spec": "gem_core.data.config",
    "target_names": "gem_core.data.config",
    "target_spec": "gem_core.data.config",
    "DataUnavailableError": "gem_core.data.datasets",
    "GemDataset": "gem_core.data.datasets",
    "Instance": "gem_core.data.instances",
    "cached_target_path": "gem_core.models.targets",
    "shipped_target_path": "gem_core.models.targets",
    # Explainers and their explanations
    "DEFAULT_TEACHER": "gem_core.explainers",
    "Explanation": "gem_core.explainers",
    "METHODS": "gem_core.explainers",
    "REPRODUCE_METHODS": "gem_core.explainers",
    "method_spec": "gem_core.explainers",
    "title": "gem_core.explainers",
    "rank_scores": "gem_core.data.ranking",
    "ranked_pairs": "gem_core.data.ranking",
    "topk_mask": "gem_core.data.ranking",
    # Molecules: SMILES, drawing, toxicophores, the Molecule flow, screening
    "EXAMPLE_SMILES": "gem_core.chemistry.smiles",
    "MoleculeError": "gem_core.chemistry.smiles",
    "REJECTION_WORDS": "gem_core.chemistry.smiles",
    "smiles_to_instance": "gem_core.chemistry.smiles",
    "fragment_smiles": "gem_core.chemistry.convert",
    "instance_to_mol": "gem_core.chemistry.convert",
    "without_hydrogens": "gem_core.chemistry.convert",
    "molecule_smiles": "gem_core.chemistry.convert",
    "HIGHLIGHT_HEX": "gem_core.chemistry.drawing",
    "draw_molecule_svg": "gem_core.chemistry.drawing",
    "draw_molecule_png": "gem_core.chemistry.drawing",
    "depiction": "gem_core.chemistry.drawing",
    "ensure_depiction": "gem_core.chemistry.drawing",
    "molecule_drawer": "gem_core.chemistry.drawing",
    "TOXICOPHORES": "gem_core.chemistry.toxicophores",
    "match_toxicophores": "gem_core.chemistry.toxicophores",
    "toxicophore_bond_mask": "gem_core.chemistry.toxicophores",
    "bond_labels": "gem_core.chemistry.labels",
    "heavy_first": "gem_core.chemistry.labels",
    "toxicophore_groups": "gem_core.chemistry.labels",
    "CLASS_NAMES": "gem_core.service.molecules",
    "DATASET": "gem_core.service.molecules",
    "ModelUnavailableError": "gem_core.service.molecules",
    "explain_molecules": "gem_core.service.molecules",
    "molecule_model": "gem_core.service.molecules",
    "suggested_k": "gem_core.service.molecules",
    "target_checkpoint_available": "gem_core.service.molecules",
    "ScreenSettings": "gem_core.service.screening",
    "Summary": "gem_core.service.screening",
    "csv_table": "gem_core.service.screening",
    "explain_rows": "gem_core.service.screening",
    "iter_rows": "gem_core.service.screening",
    "check_settings": "gem_core.service.screening.runner",
    # Your data: a chemist's table read, a model trained on it, saved, shared, exported
    "MAX_UPLOAD_BYTES": "gem_core.chemistry.tables",
    "MAX_ROWS": "gem_core.chemistry.tables",
    "TableError": "gem_core.chemistry.tables",
    "read_table": "gem_core.chemistry.tables",
    "guess_columns": "gem_core.chemistry.tables",
    "read_molecules": "gem_core.chemistry.tables",
    "undetermined_classes": "gem_core.chemistry.assay_columns",
    "nearest_training": "gem_core.service.neighbours",
    "domain_record": "gem_core.service.neighbours",
    "SPLIT_KINDS": "gem_core.chemistry.scaffolds",
    "USER_RECIPES": "gem_core.data.config",
    "DEFAULT_TIME_BUDGET_S": "gem_core.service.user_models",
    "TrainingCancelled": "gem_core.service.user_models",
    "UserModel": "gem_core.service.user_models",
    "train_user_model": "gem_core.service.user_models",
    "check_model_name": "gem_core.service.user_models",
    "fit_gem": "gem_core.service.user_models",
    "list_user_models": "gem_core.service.user_models",
    "user_model": "gem_core.service.user_models",
    "delete_user_model": "gem_core.service.user_models",
    "share_user_model": "gem_core.service.user_models",
    "export_user_model": "gem_core.service.user_models",
    "import_user_model": "gem_core.service.user_models",
    "evaluate_user_model": "gem_core.evaluation.user_model_bench",
    "BENCH_METHODS": "gem_core.evaluation.user_model_bench",
    # What-if edits and the plain-language reading
    "Edit": "gem_core.service.whatif",
    "EditError": "gem_core.service.whatif",
    "evaluate_edits": "gem_core.service.whatif",
    "read_explanation": "gem_core.service.reading",
    # Gem's distillation, for the step-through and the pipeline page
    "ACCURACY_TOPK_POLICY": "gem_core.gem.distill",
    "TIE_TOL": "gem_core.gem.distill",
    "distill": "gem_core.gem.distill",
    "topk_accuracy": "gem_core.gem.distill",
    "GreedyStep": "gem_core.gem.distill.reference",
    "reference_distill_one": "gem_core.gem.distill.reference",
    "explainer_targets": "gem_core.gem.training_targets",
    "GemSettings": "gem_core.gem.settings",
    "dataset_settings": "gem_core.gem.presets",
    "check_plan": "gem_core.gem.explain",
    # Results: the paper's tables measured, and the paper's numbers
    "recorded_fit_seconds": "gem_core.evaluation.reproduce",
    "recorded_results": "gem_core.evaluation.reproduce",
    "recorded_target_summary": "gem_core.evaluation.reproduce",
    "read_results": "gem_core.evaluation.reproduce",
    "results_path": "gem_core.evaluation.reproduce",
    "run_reproduce": "gem_core.evaluation.reproduce",
    "ResultFile": "gem_core.evaluation.result_file",
    "load_result": "gem_core.evaluation.result_file",
    "paper": "gem_core.evaluation",
    # Runtime: devices, threads, paths
    "configure_threads": "gem_core.runtime.device",
    "choose_device": "gem_core.runtime.device_choice",
    "resolve_device": "gem_core.runtime.device",
    "PROJECT_ROOT": "gem_core.runtime.store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gem_core.api' has no attribute {name!r}")
    owner = importlib.import_module(module)
    # a submodule (``paper``) is an attribute of its package only once it has been imported
    value = (
        getattr(owner, name)
        if hasattr(owner, name)
        else importlib.import_module(f"{module}.{name}")
    )
    # not cached here: each import reads the defining module, so a monkeypatched name is seen
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and editors; at run time the names load lazily
    from gem_core.chemistry.assay_columns import undetermined_classes
    from gem_core.chemistry.convert import (
        fragment_smiles,
        instance_to_mol,
        molecule_smiles,
        without_hydrogens,
    )
    from gem_core.chemistry.drawing import (
        HIGHLIGHT_HEX,
        depiction,
        draw_molecule_png,
        draw_molecule_svg,
        ensure_depiction,
        molecule_drawer,
    )
    from gem_core.chemistry.labels import bond_labels, heavy_first, toxicophore_groups
    from gem_core.chemistry.smiles import (
        EXAMPLE_SMILES,
        REJECTION_WORDS,
        MoleculeError,
        smiles_to_instance,
    )
    from gem_core.chemistry.toxicophores import (
        TOXICOPHORES,
        match_toxicophores,
        toxicophore_bond_mask,
    )
    from gem_core.data.config import (
        DATASETS,
        DEFAULT_TARGET,
        SALT_RULES,
        DatasetSpec,
        get_spec,
        molecule_default_target,
        molecule_spec,
        target_names,
        target_spec,
    )
    from gem_core.data.datasets import DataUnavailableError, GemDataset
    from gem_core.data.instances import Instance
    from gem_core.data.ranking import rank_scores, ranked_pairs, topk_mask
    from gem_core.evaluation import paper
    from gem_core.evaluation.reproduce import (
        read_results,
        recorded_fit_seconds,
        recorded_results,
        recorded_target_summary,
        results_path,
        run_reproduce,
    )
    from gem_core.evaluation.result_file import ResultFile, load_result
    from gem_core.explainers import (
        DEFAULT_TEACHER,
        METHODS,
        REPRODUCE_METHODS,
        Explanation,
        method_spec,
        title,
    )
    from gem_core.gem.distill import ACCURACY_TOPK_POLICY, TIE_TOL, distill, topk_accuracy
    from gem_core.gem.distill.reference import GreedyStep, reference_distill_one
    from gem_core.gem.explain import check_plan
    from gem_core.gem.presets import dataset_settings
    from gem_core.gem.settings import GemSettings
    from gem_core.gem.training_targets import explainer_targets
    from gem_core.models.targets import cached_target_path, shipped_target_path
    from gem_core.runtime.device import configure_threads, resolve_device
    from gem_core.runtime.device_choice import choose_device
    from gem_core.runtime.store import PROJECT_ROOT
    from gem_core.service.molecules import (
        CLASS_NAMES,
        DATASET,
        ModelUnavailableError,
        explain_molecules,
        molecule_model,
        suggested_k,
        target_checkpoint_available,
    )
    from gem_core.service.neighbours import domain_record, nearest_training
    from gem_core.service.reading import read_explanation
    from gem_core.service.screening import (
        ScreenSettings,
        Summary,
        csv_table,
        explain_rows,
        iter_rows,
    )
    from gem_core.service.screening.runner import check_settings
    from gem_core.service.session import Workbench, forget_explainer, workbench
    from gem_core.service.whatif import Edit, EditError, evaluate_edits
