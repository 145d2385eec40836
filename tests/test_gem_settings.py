"""GemSettings (every Gem setting, validated at construction), the dataset / target rows merged
into it, the one fit pipeline the three front-ends build through, and the keys of the shipped
explainers, which must never change."""
from __future__ import annotations


import pytest
import torch

from gem_core.data.config import DATASETS, get_spec, target_names
from gem_core.gem.check_rules import REPAIR
from gem_core.gem.pipeline import GemPipeline
from gem_core.gem.presets import MAX_ROW_DIFF, PRESETS, dataset_settings
from gem_core.gem.settings import (SETTING_PATHS, Decoder, GemSettings, LabelSource, TargetKind,
                                   TopKPolicy)

torch.set_num_threads(1)

# the key of every shipped Gem (assets/explainers/*.pt): the settings of each dataset and target
# must keep producing exactly these, or the shipped fits stop loading and get refitted
SHIPPED_KEYS = {("ba_shapes", "paper"): "60670e53c331", ("tree_cycles", "paper"): "3662fd35bed3",
                ("mutagenicity", "paper"): "8a11b6060ec9",
                ("mutagenicity", "strong"): "74f78c9d4804", ("nci1", "paper"): "f902a47a8087"}


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("path, value, message", [
    ("network.decoder", "foo", "GemSettings.network.decoder: 'foo' is not one of inner, mlp"),
    ("teacher.kind", "nope", "GemSettings.teacher.kind: 'nope' is not one of weights, graded, "
                             "mix, graded+add, blend, signed"),
    ("teacher.topk_policy", "best", "GemSettings.teacher.topk_policy: 'best' is not one of "
                                    "nosplit, exact, paper, refine, sufficient"),
    ("teacher.protocol", "both", "GemSettings.teacher.protocol: 'both' is not one of keep_nodes, "
                                 "drop_isolated"),
    ("teacher.necessity_weight", -1,
     "GemSettings.teacher.necessity_weight: -1 is not a non-negative number"),
    ("teacher.connected", "yes", "GemSettings.teacher.connected: 'yes' is not True or False"),
    ("teacher.label_source", "guess",
     "GemSettings.teacher.label_source: 'guess' is not one of true, predicted"),
    ("training.lr", 0, "GemSettings.training.lr: 0 is not a positive number"),
    ("training.lr", "fast", "GemSettings.training.lr: 'fast' is not a positive number"),
    ("training.batch_size", 0, "GemSettings.training.batch_size: 0 is not a positive integer"),
    ("training.patience", 1.5, "GemSettings.training.patience: 1.5 is not a positive integer"),
    ("training.max_epochs", True,
     "GemSettings.training.max_epochs: True is not a positive integer"),
    ("training.val_fraction", 1.0,
     "GemSettings.training.val_fraction: 1.0 is not a number in [0, 1)"),
    ("network.hidden", (32,), "GemSettings.network.hidden: (32,) is not at least two positive "
                              "widths"),
    ("inputs.degree_features", "yes",
     "GemSettings.inputs.degree_features: 'yes' is not True or False"),
    ("teacher.ks", (0, 3), "GemSettings.teacher.ks: K must be at least 1, got 0."),
    ("check.rule", "hope", "GemSettings.check.rule: 'hope' is not one of off, repair, best, "
                           "search, sustain, climb"),
    ("check.late", "off", "GemSettings.check.late: 'off' is not a rule that asks the target "
                          "(or 'same')"),
    ("check.backward", "all", "GemSettings.check.backward: 'all' is not one of off, grid, late"),
    ("check.width", 0, "GemSettings.check.width: 0 is not a positive integer"),
    ("seed", "zero", "GemSettings.seed: 'zero' is not an integer"),
])
def test_a_bad_value_is_refused_in_one_line_naming_its_path(path, value, message):
    with pytest.raises(ValueError) as info:
        GemSettings().with_overrides({path: value})
    assert str(info.value) == message and "\n" not in str(info.value)


def test_settings_are_a_few_small_groups():
    """The acceptance of issue 53: at most 8 top-level fields (a group counts as one)."""
    from dataclasses import fields

    top = fields(GemSettings)
    assert len(top) <= 8
    groups = [f for f in top if f.name != "seed"]
    assert all(len(fields(getattr(GemSettings(), f.name))) <= 8 for f in groups)
    # every path is readable and round-trips through with_overrides
    s = GemSettings()
    for path in SETTING_PATHS:
        assert s.with_overrides({path: s.get(path)}) == s


def test_strings_are_accepted_for_the_options_with_a_fixed_set_of_values():
    s = GemSettings().with_overrides({
        "teacher.kind": "graded+add", "teacher.topk_policy": "refine",
        "teacher.label_source": "predicted", "network.decoder": "mlp",
        "network.hidden": [64, 64, 32], "teacher.ks": range(1, 4), "check.rule": "Repair",
        "check.late": "same", "check.backward": "grid"})
    assert s.network.decoder is Decoder.mlp and s.network.decoder == "mlp"
    assert str(s.network.decoder) == "mlp"
    assert s.teacher.kind is TargetKind.graded_add and s.teacher.topk_policy is TopKPolicy.refine
    assert s.teacher.label_source is LabelSource.predicted
    assert s.network.hidden == (64, 64, 32) and s.teacher.ks == (1, 2, 3)  # tuples
    assert s.check.rule is REPAIR and s.check.late is None and s.check.backward.name == "grid"
    assert s.asks_target and not s.unchecked().asks_target
    # the auto-encoder gets plain values (its saved state holds strings, never enums)
    params = s.autoencoder_params()
    assert type(params["decoder"]) is str and params["decoder"] == "mlp"
    with pytest.raises(ValueError, match="unknown Gem setting 'network.decodr'"):
        s.with_overrides({"network.decodr": "mlp"})
    with pytest.raises(ValueError, match="unknown Gem setting 'decoder'"):
        s.with_overrides({"decoder": "mlp"})  # paths only


# ----------------------------------------------------------------------------- presets, rows

def test_the_dataset_and_target_rows_name_presets_and_change_at_most_five_settings():
    from gem_core.data.config import TARGETS

    for spec in DATASETS.values():
        rows = [spec.gem] + [TARGETS[t].recipe(spec).gem for t in target_names(spec)]
        for row in rows:
            assert len([k for k in row if k != "preset"]) <= MAX_ROW_DIFF, spec.name
            assert "preset" not in row or row["preset"] in PRESETS
    ba = dataset_settings(get_spec("ba_shapes"))
    assert ba == PRESETS["ba_shapes"].with_overrides({"inputs.num_hops": 3})
    assert (ba.training.lr, ba.teacher.kind, ba.training.max_epochs) == (0.003, "graded+add", 1000)
    assert ba.training.batch_size == GemSettings().training.batch_size  # the default
    mut = get_spec("mutagenicity")
    paper, strong = dataset_settings(mut), dataset_settings(mut, "strong")
    assert paper.teacher.topk_policy == "refine" and paper.inputs.condition_on_prediction
    assert paper.teacher.ks == () and paper.network.decoder == "inner"
    # the strong target's row names a preset of its own
    assert strong.teacher.ks == tuple(range(1, 31)) and strong.network.decoder == "mlp"
    assert strong.inputs.wl_edge_labels and strong.inputs.edge_features
    assert dataset_settings(mut, "Strong ") == strong
    with pytest.raises(ValueError, match="Unknown target 'huge'"):
        dataset_settings(mut, "huge")
    for spec in DATASETS.values():
        assert dataset_settings(spec).inputs.num_hops == spec.num_hops


def test_a_row_with_a_bad_value_an_unknown_path_or_too_many_changes_is_refused():
    from dataclasses import replace

    spec = replace(get_spec("nci1"), gem={"preset": "nci1", "network.decoder": "dense"})
    with pytest.raises(ValueError, match="GemSettings.network.decoder: 'dense' is not one of"):
        dataset_settings(spec)
    spec = replace(get_spec("nci1"), gem={"epochs": 5})
    with pytest.raises(ValueError, match="NCI1, target 'paper': unknown Gem setting 'epochs'"):
        dataset_settings(spec)
    spec = replace(get_spec("nci1"), gem={"preset": "nope"})
    with pytest.raises(ValueError, match="unknown Gem preset 'nope'"):
        dataset_settings(spec)
    six = {"training.lr": 0.1, "training.patience": 3, "network.ensemble": 2,
           "check.width": 4, "check.lead": 1, "seed": 5}
    with pytest.raises(ValueError, match="at most 5 settings beyond its preset, this one 6"):
        dataset_settings(replace(get_spec("nci1"), gem=six))


def test_no_preset_repeats_another_and_each_has_a_decision_record():
    from gem_core.runtime.store import PROJECT_ROOT

    names = list(PRESETS)
    assert len({PRESETS[n] for n in names}) == len(names)  # frozen: hashable, all distinct
    records = " ".join(p.read_text() for p in (PROJECT_ROOT / "docs" / "decisions").glob("*.md"))
    for name in names:
        assert f"`{name}`" in records, name


# ----------------------------------------------------------------------------- shipped keys

def test_the_key_of_every_shipped_explainer_is_unchanged():
    """Computed without any data or model: the settings of each dataset and target, the shipped
    target's digest; the key recorded in each shipped explainer must be what they give."""
    from types import SimpleNamespace

    from gem_core.explainers import ExplainerContext
    from gem_core.explainers.gem import GemExplainer
    from gem_core.models.targets import shipped_target_path
    from gem_core.runtime.store import ASSETS_DIR, file_digest

    seen = set()
    for name, spec in DATASETS.items():
        for target in target_names(spec):
            digest = file_digest(shipped_target_path(name, target))
            ctx = ExplainerContext(SimpleNamespace(digest=digest), spec, torch.device("cpu"),
                                   gem_settings=dataset_settings(spec, target))
            key = GemExplainer(ctx).state_key(ctx)
            assert key == SHIPPED_KEYS[(name, target)], (name, target)
            stem = name if target == "paper" else f"{name}-{target}"
            meta = torch.load(ASSETS_DIR / "explainers" / f"{stem}.pt", weights_only=False)["meta"]
            assert meta["key"] == key and meta["target"] == digest
            seen.add((name, target))
    assert seen == set(SHIPPED_KEYS)


# ----------------------------------------------------------------------------- the one pipeline

def _weights(autoencoder) -> dict[str, torch.Tensor]:
    return autoencoder.model_.state_dict()


@pytest.mark.parametrize("task", ["node", "graph-bonds"])
def test_the_registry_gem_is_the_pipeline(task):
    """The same instances and settings give identical weights through the registry's Gem and
    through GemPipeline directly."""
    from tests.test_registry import toy_context

    from gem_core.explainers import REGISTRY

    ctx, train, val, test = toy_context(task)
    overrides = ({} if task == "node" else
                 {"inputs.condition_on_prediction": True, "teacher.label_source": "predicted",
                  "network.decoder": "mlp", "inputs.edge_features": True,
                  "teacher.kind": "graded+add"})
    gem = REGISTRY["gem"].create(ctx, settings=overrides).fit(train, val)
    settings = dataset_settings(ctx.spec).with_overrides(overrides)
    assert gem.settings == settings
    pipeline = GemPipeline(settings, ctx.spec.k_grid, ctx.black_box, ctx.spec.num_classes,
                           device=ctx.device, distiller=ctx.distill)
    direct = pipeline.fit(train, val)
    a, b = _weights(gem.autoencoder_), _weights(direct)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ours = gem.explain(test)
    theirs = direct.explain(pipeline.inputs(test))
    assert all(torch.equal(x, y) for x, y in zip(ours, theirs))


def test_the_pyg_adapter_fits_through_the_pipeline(monkeypatch):
    from torch_geometric.data import Data
    from torch_geometric.explain import Explainer
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import to_undirected

    from gem_core.pyg import GemExplainer

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(3, 8), GCNConv(8, 2)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    calls = []
    real_fit = GemPipeline.fit

    def spy(self, *args, **kwargs):
        calls.append(self.settings)
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(GemPipeline, "fit", spy)
    gen = torch.Generator().manual_seed(0)
    edge_index = to_undirected(torch.randint(0, 30, (2, 60), generator=gen), num_nodes=30)
    data = Data(x=torch.randn(30, 3, generator=gen), edge_index=edge_index)
    torch.manual_seed(0)
    model = Net().eval()
    algo = GemExplainer(epochs=3, k=(2, 3), seed=4,
                        settings={"training.lr": 0.02, "training.batch_size": 8})
    Explainer(model, algorithm=algo, explanation_type="model", edge_mask_type="object",
              model_config=dict(mode="multiclass_classification", task_level="node",
                                return_type="raw"))
    algo.fit(model, data, index=list(range(20)))
    want = GemSettings().with_overrides({
        "teacher.kind": "mix", "teacher.topk_policy": "nosplit",
        "teacher.label_source": "predicted", "teacher.protocol": "drop_isolated",
        "teacher.connected": True, "training.lr": 0.02, "training.batch_size": 8,
        "training.max_epochs": 3, "inputs.num_hops": 2, "check.protocol": "taught", "seed": 4})
    assert calls == [want] and algo.settings_ == want
    assert algo.gem_.get_params()["lr"] == 0.02 and algo.gem_.get_params()["seed"] == 4


def test_the_tuning_sweep_fits_through_the_pipeline(monkeypatch):
    from gem_core.evaluation.tuning import Variant, validation_sweep
    from gem_core.service.session import Workbench

    calls = []
    real = GemPipeline.fit_autoencoder

    def spy(self, *args, **kwargs):
        calls.append(self.settings)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GemPipeline, "fit_autoencoder", spy)
    wb = Workbench("tree_cycles", "cpu")
    variant = Variant("w", {"training.max_epochs": 1, "teacher.kind": "weights"})
    validation_sweep(wb, [variant], seeds=[3], include_current=False)
    assert calls == [wb.gem_settings.with_overrides(
        {"training.max_epochs": 1, "teacher.kind": "weights", "seed": 3})]


def test_the_settings_page_lists_every_path_and_preset():
    from gem_core.runtime.store import PROJECT_ROOT

    page = (PROJECT_ROOT / "docs" / "settings.md").read_text()
    for name in (*SETTING_PATHS, *PRESETS):
        assert f"`{name}`" in page, name
