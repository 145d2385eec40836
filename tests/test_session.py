"""The shared Workbench under concurrent use: what the app's browser sessions do at once."""
from __future__ import annotations

import threading

import torch

from gem_core.service.session import workbench


def test_two_threads_explain_with_a_fit_free_method_at_once_and_agree():
    """A thread finding the shared GNNExplainer busy gets an explainer of its own instead of
    waiting for the lock; its masks are those the shared one gives (issue 49: sessions of a
    class no longer queue behind each other's GNNExplainer runs)."""
    wb = workbench("ba_shapes", "cpu")
    instances = wb.browse_instances("test")[-2:]  # two 1,200-1,500-edge base nodes
    alone = [wb.explain("gnnexplainer", [inst])[0] for inst in instances]
    lock = wb._method_locks["gnnexplainer"]
    got: dict[int, torch.Tensor] = {}
    with lock:  # the shared explainer is busy (another session)
        worker = threading.Thread(target=lambda: got.update(
            {0: wb.explain("gnnexplainer", [instances[0]])[0]}))
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive(), "the thread waited for the busy shared explainer"
    got[1] = wb.explain("gnnexplainer", [instances[1]])[0]
    for a, b in zip(alone, (got[0], got[1])):
        assert torch.equal(a, b)


def test_teachers_share_one_distillation_where_the_labels_agree(monkeypatch):
    """The true-label and predicted-label teachers of instances outside the splits (the app's
    contrast nodes) distil once where the target predicts the true label, and a second call
    for the same instances distils nothing; an edited instance is distilled anew."""
    from gem_core.gem import distill as distill_package
    import gem_core.gem.distill.engine as engine

    wb = workbench("tree_cycles", "cpu")
    extra = wb.browse_instances("test")[len(wb.instances("test")):][:3]
    preds = wb.predict_proba(extra).argmax(-1).tolist()
    assert preds == [inst.y for inst in extra]  # the target is right on them
    calls = []
    real = engine.distill

    def counting(instances, *args, **kwargs):
        calls.append(len(instances))
        return real(instances, *args, **kwargs)

    monkeypatch.setattr(distill_package, "distill", counting)
    true = wb.explain("distilled", extra)
    predicted = wb.explain("distilled_predicted", extra)
    again = wb.explain("distilled_predicted", extra)
    assert calls == [3]
    assert all(torch.equal(a, b) for a, b in zip(true, predicted))
    assert all(torch.equal(a, b) for a, b in zip(predicted, again))
    edited = extra[0].subgraph(torch.arange(extra[0].num_pairs) != 0)
    wb.explain("distilled", [edited])
    assert calls == [3, 1]
