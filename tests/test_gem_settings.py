"""GemSettings (every Gem setting, validated at construction), the dataset / target rows merged
into it, the one fit pipeline the three front-ends build through, and the keys of the shipped
explainers, which must never change."""
from __future__ import annotations


import pytest
import torch

from gem_core.data.config import DATASETS, get_spec, target_names
from gem_core.gem.pipeline import GemPipeline
from gem_core.gem.settings import (Decoder, GemSettings, LabelSource, TargetKind, TopKPolicy)

torch.set_num_threads(1)

# the key of every shipped Gem (assets/explainers/*.pt): the settings of each dataset and target
# must keep producing exactly these, or the shipped fits stop loading and get refitted
SHIPPED_KEYS = {("ba_shapes", "paper"): "60670e53c331", ("tree_cycles", "paper"): "3662fd35bed3",
                ("mutagenicity", "paper"): "aea69efb2306",
                ("mutagenicity", "strong"): "cf73af85c5e0", ("nci1", "paper"): "f902a47a8087"}


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("field, value, message", [
    ("decoder", "foo", "GemSettings.decoder: 'foo' is not one of inner, mlp"),
    ("target_kind", "nope", "GemSettings.target_kind: 'nope' is not one of weights, graded, mix, "
                            "graded+add, blend"),
    ("topk_policy", "best", "GemSettings.topk_policy: 'best' is not one of nosplit, exact, paper, "
                            "refine, sufficient"),
    ("protocol", "both", "GemSettings.protocol: 'both' is not one of keep_nodes, drop_isolated"),
    ("necessity_weight", -1, "GemSettings.necessity_weight: -1 is not a non-negative number"),
    ("connected_growth", "yes", "GemSettings.connected_growth: 'yes' is not True or False"),
    ("label_source", "guess", "GemSettings.label_source: 'guess' is not one of true, predicted"),
    ("lr", 0, "GemSettings.lr: 0 is not a positive number"),
    ("lr", "fast", "GemSettings.lr: 'fast' is not a positive number"),
    ("batch_size", 0, "GemSettings.batch_size: 0 is not a positive integer"),
    ("patience", 1.5, "GemSettings.patience: 1.5 is not a positive integer"),
    ("max_epochs", True, "GemSettings.max_epochs: True is not a positive integer"),
    ("kl_weight", -1.0, "GemSettings.kl_weight: -1.0 is not a non-negative number"),
    ("hidden", (32,), "GemSettings.hidden: (32,) is not at least two positive widths"),
    ("degree_features", "yes", "GemSettings.degree_features: 'yes' is not True or False"),
    ("target_ks", (0, 3), "GemSettings.target_ks: K must be at least 1, got 0."),
    ("seed", "zero", "GemSettings.seed: 'zero' is not an integer"),
])
def test_a_bad_value_is_refused_at_construction_in_one_line_naming_the_field(field, value,
                                                                              message):
    with pytest.raises(ValueError) as info:
        GemSettings(**{field: value})
    assert str(info.value) == message and "\n" not in str(info.value)
    with pytest.raises(ValueError, match=f"GemSettings.{field}:"):
        GemSettings().replace(**{field: value})  # a change is validated the same way


def test_strings_are_accepted_for_the_options_with_a_fixed_set_of_values():
    s = GemSettings(target_kind="graded+add", topk_policy="refine", label_source="predicted",
                    decoder="mlp", hidden=[64, 64, 32], target_ks=range(1, 4))
    assert s.decoder is Decoder.mlp and s.decoder == "mlp" and str(s.decoder) == "mlp"
    assert s.target_kind is TargetKind.graded_add and s.topk_policy is TopKPolicy.refine
    assert s.label_source is LabelSource.predicted
    assert Decoder("mlp") is Decoder.mlp and TargetKind("graded+add") is TargetKind.graded_add
    assert s.hidden == (64, 64, 32) and s.target_ks == (1, 2, 3)  # normalised to tuples
    assert s == GemSettings(target_kind=TargetKind.graded_add, topk_policy=TopKPolicy.refine,
                            label_source=LabelSource.predicted, decoder=Decoder.mlp,
                            hidden=(64, 64, 32), target_ks=(1, 2, 3))
    # the auto-encoder gets plain values (its saved state holds strings, never enums)
    params = s.autoencoder_params()
    assert type(params["decoder"]) is str and params["decoder"] == "mlp"
    with pytest.raises(ValueError, match="unknown Gem setting 'decodr'"):
        s.replace(decodr="mlp")


# ----------------------------------------------------------------------------- rows

def test_the_dataset_and_target_rows_are_merged_over_the_defaults():
    ba = GemSettings.for_dataset(get_spec("ba_shapes"))
    assert (ba.lr, ba.target_kind, ba.max_epochs, ba.patience, ba.decoder, ba.degree_features) == (
        0.003, "graded+add", 1000, 100, "mlp", True)
    assert ba.batch_size == GemSettings().batch_size  # not in the row: the default
    mut = get_spec("mutagenicity")
    paper, strong = GemSettings.for_dataset(mut), GemSettings.for_dataset(mut, "strong")
    assert paper.topk_policy == "refine" and paper.condition_on_prediction
    assert paper.label_source == "predicted" and paper.target_ks == () and paper.decoder == "inner"
    # the strong target's own row over the dataset's
    assert strong.target_ks == tuple(range(1, 31)) and strong.decoder == "mlp"
    assert strong.wl_edge_labels and strong.edge_features and strong.topk_policy == "refine"
    assert GemSettings.for_dataset(mut, "Strong ") == strong
    with pytest.raises(ValueError, match="Unknown target 'huge'"):
        GemSettings.for_dataset(mut, "huge")
    for spec in DATASETS.values():
        assert GemSettings.for_dataset(spec).num_hops == spec.num_hops


def test_a_bad_value_in_a_row_names_the_field():
    from dataclasses import replace

    spec = replace(get_spec("nci1"), gem={"decoder": "dense"})
    with pytest.raises(ValueError, match="GemSettings.decoder: 'dense' is not one of"):
        GemSettings.for_dataset(spec)
    spec = replace(get_spec("nci1"), gem={"epochs": 5})
    with pytest.raises(ValueError, match="NCI1: unknown Gem setting 'epochs'"):
        GemSettings.for_dataset(spec)


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
                                   gem_settings=GemSettings.for_dataset(spec, target))
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
                 dict(condition_on_prediction=True, label_source="predicted", decoder="mlp",
                      edge_features=True, target_kind="graded+add"))
    gem = REGISTRY["gem"].create(ctx, **overrides).fit(train, val)
    settings = GemSettings.for_dataset(ctx.spec).replace(**overrides)
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
    algo = GemExplainer(epochs=3, k=(2, 3), lr=0.02, batch_size=8, seed=4)
    Explainer(model, algorithm=algo, explanation_type="model", edge_mask_type="object",
              model_config=dict(mode="multiclass_classification", task_level="node",
                                return_type="raw"))
    algo.fit(model, data, index=list(range(20)))
    want = GemSettings(target_kind="mix", topk_policy="nosplit", label_source="predicted",
                       lr=0.02, batch_size=8, max_epochs=3, num_hops=2, seed=4,
                       protocol="drop_isolated", check="off", check_width=3)
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
    validation_sweep(wb, [Variant("w", {"max_epochs": 1, "target": "weights"})], seeds=[3],
                     include_current=False)
    assert calls == [wb.gem_settings.replace(max_epochs=1, target_kind="weights", seed=3)]
