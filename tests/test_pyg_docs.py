"""docs/pyg.md runs as written: its python blocks are executed in order, at a reduced size."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parent.parent / "docs" / "pyg.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_doc_has_the_expected_blocks():
    text = DOC.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    assert len(blocks) >= 6
    joined = "\n".join(blocks)
    for needle in ("GemExplainer(", "explainer.algorithm.fit(model, data, index=train_nodes",
                   "graph_explainer.algorithm.fit(graph_model, graphs", "fidelity(",
                   "compare(model, data"):
        assert needle in joined, needle
    assert "python -m gem_core.examples.ba_community" in text
    assert "FIGURES_PLACEHOLDER" not in text, "the results section still needs its figures"


def value_explainer_is_regression(explainer) -> bool:
    algo = explainer.algorithm
    return algo.regression and algo.target_task_ == 0 and algo.distillation_.labels.is_floating_point()


def test_doc_code_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GEM_DOCS_SMALL", "1")
    for name in ("GEM_DATA_ROOT", "GEM_CACHE_DIR"):  # relative paths (CI's) outlive the chdir
        if os.environ.get(name):
            monkeypatch.setenv(name, os.path.abspath(os.environ[name]))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "pyg_doc"}
    threads = torch.get_num_threads()
    try:
        for i, block in enumerate(python_blocks(DOC.read_text(encoding="utf-8"))):
            try:
                exec(compile(block, f"docs/pyg.md block {i}", "exec"), namespace)
            except Exception as exc:  # pragma: no cover - the message names the failing block
                pytest.fail(f"docs/pyg.md python block {i} failed: {type(exc).__name__}: {exc}")
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    # the walk-through produced what it says it does
    explanation = namespace["explanation"]
    assert int((explanation.edge_mask > 0).sum()) == 2 * namespace["K"]
    many = namespace["many"]
    assert many.edge_masks.shape == (len(namespace["test_nodes"]), namespace["data"].num_edges)
    graph_explanation = namespace["graph_explanation"]
    assert graph_explanation.edge_mask.shape == (namespace["batch"].num_edges,)
    # bond features: fitted with them, explained with them
    assert namespace["bond_explainer"].algorithm.edge_inputs_.names == ("edge_attr",)
    assert namespace["bond_explanation"].edge_mask.shape == (namespace["held_out"].num_edges,)
    # atom masks: each atom's best bond, from the same fitted Gem
    held_out, atoms = namespace["held_out"], namespace["atom_explanation"]
    assert atoms.node_mask.shape == (held_out.num_nodes, 1)
    assert torch.equal(atoms.edge_mask, namespace["bond_explanation"].edge_mask)
    src = held_out.edge_index[0]
    best = torch.zeros(held_out.num_nodes).scatter_reduce(
        0, src, atoms.edge_mask, reduce="amax", include_self=True)
    assert torch.equal(atoms.node_mask.view(-1), best)
    # regression, one task of two: the double bond (the edge that moves the value) ranks first
    odd, value_explanation = namespace["odd"], namespace["value_explanation"]
    assert value_explainer_is_regression(namespace["value_explainer"])
    assert float(odd.edge_attr[value_explanation.edge_mask.argmax(), 1]) == 1.0
    comparison = namespace["comparison"]
    assert set(comparison.results) == {"gem", "gnnexplainer", "pgexplainer"}
    for result in comparison.results.values():
        assert set(result.accuracy_at_k) == {5, 6, 7, 8, 9}
        assert result.edge_auc is not None and 0.0 <= result.edge_auc <= 1.0
        assert result.ms_per_instance > 0
    # Gem explains all test nodes in one batched call: faster per node than PyG's per-node calls
    assert comparison.speedup("gnnexplainer") > 1.0
    assert "Gem explains a node" in out and "fidelity+" in out
