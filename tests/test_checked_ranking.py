"""The target's check of Gem's ranking (gem_core.gem.checked_ranking) on hand-computed cases:
hand-written black boxes whose prediction depends on a known pair or on a known node."""
import pytest
import torch

from gem_core.data.instances import Instance
from gem_core.data.packed import PackedGraphs
from gem_core.data.ranking import ranked_pairs
from gem_core.gem.checked_ranking import checked_scores
from gem_core.gem.settings import GemSettings
from tests.conftest import requires_mutagenicity
from tests.test_faithfulness import marked_edge_box, marked_node_box


def _graph(x0, x1, pairs, target=None):
    x = torch.tensor([x0, x1], dtype=torch.float).t().contiguous()
    return Instance(x=x, pairs=torch.tensor(pairs, dtype=torch.long).t().contiguous(), y=0,
                    target=target)


def _star():
    """Centre 0 with leaves 1-4; nodes 0 and 4 marked: only the pair (0, 4) (index 3) makes the
    marked-edge box say class 1, which it says on the whole graph."""
    return _graph([1, 0, 0, 0, 1], [0, 0, 0, 0, 0], [(0, 1), (0, 2), (0, 3), (0, 4)])


def _order(inst, scores):
    return ranked_pairs(scores, inst.num_pairs)


def _check(box, insts, scores, rule, width=3, start=0, stop=None, predicted=None, late=None,
           backward=()):
    packed = PackedGraphs.from_instances(insts)
    flat = torch.cat(scores)
    if predicted is None:
        predicted = box(packed.forward_batch()).argmax(-1)
    out = checked_scores(box, packed, flat, predicted, start=start,
                         stop=stop or max(i.num_pairs for i in insts), width=width, rule=rule,
                         late=late, backward=backward)
    return packed.split_pairs(out)


GEM = torch.tensor([0.9, 0.8, 0.7, 0.6])  # Gem ranks the deciding pair (index 3) last


def test_off_returns_gems_scores_unchanged():
    g = _star()
    (out,) = _check(marked_edge_box, [g], [GEM], "off")
    assert torch.equal(out, GEM)


@pytest.mark.parametrize("rule", ["repair", "best"])
def test_a_failing_next_pair_gives_way_to_a_candidate_the_prediction_holds_on(rule):
    g = _star()
    # width 4: every pair is a candidate at position 0; only (0, 4) alone keeps class 1
    (out,) = _check(marked_edge_box, [g], [GEM], rule, width=4)
    assert _order(g, out) == [3, 0, 1, 2]
    # Gem's own values, given out along the new order
    assert sorted(out.tolist()) == sorted(GEM.tolist())
    assert float(out[3]) == pytest.approx(0.9)


def test_repair_keeps_gems_pair_when_no_candidate_holds_then_takes_the_one_that_does():
    g = _star()
    # width 2: at position 0 neither (0, 1) nor (0, 2) holds -> Gem's (0, 1); at position 1 the
    # candidates are (0, 2) and (0, 3): neither holds -> Gem's (0, 2); at position 2: (0, 3)
    # fails, (0, 4) holds -> (0, 4)
    (out,) = _check(marked_edge_box, [g], [GEM], "repair", width=2)
    assert _order(g, out) == [0, 1, 3, 2]


def test_search_looks_past_the_width_for_a_pair_the_prediction_holds_on():
    g = _star()
    # width 1: at position 0 Gem's (0, 1) fails and is the only candidate; repair keeps Gem's
    # order, search asks every pair left and places (0, 4), the one the prediction holds on
    (repaired,) = _check(marked_edge_box, [g], [GEM], "repair", width=1)
    assert _order(g, repaired) == [0, 1, 2, 3]
    (searched,) = _check(marked_edge_box, [g], [GEM], "search", width=1)
    assert _order(g, searched) == [3, 0, 1, 2]
    # sustain only acts once the explanation has held: here it never held before (0, 4)
    (sustained,) = _check(marked_edge_box, [g], [GEM], "sustain", width=1)
    assert _order(g, sustained) == [0, 1, 2, 3]


def _marked_minus_poison_box(batch):
    """Class 1 iff the graph has more edges between two marked nodes (feature 0) than edges
    at a poisoned node (feature 1)."""
    u, v = batch.edge_index
    marked = (batch.x[u, 0] * batch.x[v, 0] > 0).double()
    poison = ((batch.x[u, 1] + batch.x[v, 1]) > 0).double()
    diff = torch.zeros(batch.num_instances, dtype=torch.float64).index_add_(
        0, batch.batch[u], marked - poison)
    return torch.stack([torch.zeros_like(diff), torch.where(diff > 0, 1.0, -1.0)], 1)


def test_search_and_sustain_keep_a_sufficient_explanation_sufficient():
    # marked nodes 0, 1, 2; node 5 poisoned. Pairs: 0 (0, 1) marked, 1 (3, 5) poisoned,
    # 2 (2, 3), 3 (3, 4), 4 (1, 2) marked. Whole graph: 2 marked, 1 poisoned -> class 1
    g = _graph([1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1],
               [(0, 1), (3, 5), (2, 3), (3, 4), (1, 2)])
    gem = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
    # repair, width 1: (0, 1) holds; Gem's next (3, 5) breaks it and is kept (nothing else asked)
    (repaired,) = _check(_marked_minus_poison_box, [g], [gem], "repair", width=1)
    assert _order(g, repaired) == [0, 1, 2, 3, 4]
    # search and sustain: where (3, 5) fails, every pair left is asked; the prediction holds on
    # (2, 3), (3, 4) and (1, 2) alike, so Gem's order among them; (3, 5) comes last
    for rule in ("search", "sustain", "climb"):
        (out,) = _check(_marked_minus_poison_box, [g], [gem], rule, width=1)
        assert _order(g, out) == [0, 2, 3, 4, 1], rule


def _two_marked_edges_box(batch):
    """Class 1 iff the graph has at least two edges between marked nodes (feature 0), surer
    with each one: the logit of class 1 is their count minus 1.5."""
    u, v = batch.edge_index
    marked = (batch.x[u, 0] * batch.x[v, 0] > 0).double() / 2  # each pair in both directions
    count = torch.zeros(batch.num_instances, dtype=torch.float64).index_add_(
        0, batch.batch[u], marked)
    return torch.stack([torch.zeros_like(count), count - 1.5], 1)


def test_climb_places_the_surest_pair_where_no_pair_makes_the_prediction_hold():
    # marked nodes 3, 4, 5: pairs 3 (3, 4) and 4 (4, 5) are the marked edges, Gem ranks them
    # last. No single pair makes class 1 hold at position 0 (one marked edge is not enough)
    g = _graph([0, 0, 0, 1, 1, 1], [0] * 6, [(0, 1), (0, 2), (0, 3), (3, 4), (4, 5)])
    gem = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
    # search: nothing holds at positions 0-3, so Gem's order; the prediction holds from 5 pairs
    (searched,) = _check(_two_marked_edges_box, [g], [gem], "search", width=1)
    assert _order(g, searched) == [0, 1, 2, 3, 4]
    # climb: at position 0 the surest pair is a marked one, (3, 4) (Gem's order among the
    # two); at position 1 the prediction holds with (4, 5): it holds from 2 pairs on
    (climbed,) = _check(_two_marked_edges_box, [g], [gem], "climb", width=1)
    assert _order(g, climbed) == [3, 4, 0, 1, 2]
    # as a late rule, from position 1: (0, 1) stays first, then the climb
    (late,) = _check(_two_marked_edges_box, [g], [gem], "search", width=1, late=(1, "climb"))
    assert _order(g, late) == [0, 3, 4, 1, 2]


def _graded_marked_minus_poison_box(batch):
    """As the marked-minus-poison box, surer with each marked edge more than poisoned edges:
    the logit of class 1 is that difference minus 0.5."""
    u, v = batch.edge_index
    marked = (batch.x[u, 0] * batch.x[v, 0] > 0).double() / 2  # each pair in both directions
    poison = ((batch.x[u, 1] + batch.x[v, 1]) > 0).double() / 2
    diff = torch.zeros(batch.num_instances, dtype=torch.float64).index_add_(
        0, batch.batch[u], marked - poison)
    return torch.stack([torch.zeros_like(diff), diff - 0.5], 1)


def _poison_first():
    """Marked nodes 0, 1, 2, node 5 poisoned. Pairs 0 (3, 5) poisoned, 1 (2, 3), 2 (3, 4),
    3 (0, 1) marked, 4 (1, 2) marked; Gem ranks them in that order. Whole graph: 2 marked, 1
    poisoned -> class 1."""
    g = _graph([1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1],
               [(3, 5), (2, 3), (3, 4), (0, 1), (1, 2)])
    return g, torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])


def test_backward_finds_the_all_but_one_explanation_growth_cannot_reach():
    g, gem = _poison_first()
    # repair of 1 keeps Gem's order: every top-k up to 4 fails (at most 1 marked, 1 poisoned)
    (grown,) = _check(_graded_marked_minus_poison_box, [g], [gem], "repair", width=1)
    assert _order(g, grown) == [0, 1, 2, 3, 4]
    # at K = 4, backwards from the whole graph: dropping the poisoned pair leaves the prediction
    # surest (logit 1.5; dropping (2, 3) or (3, 4): 0.5; a marked pair: fails). The kept 4 in
    # the growth's order, the dropped pair after
    (back,) = _check(_graded_marked_minus_poison_box, [g], [gem], "repair", width=1,
                     backward=((0, 4),))
    assert _order(g, back) == [1, 2, 3, 4, 0]
    assert sorted(back.tolist()) == sorted(gem.tolist())  # Gem's own values, reassigned
    # at K = 2 and 4: the top 2 is searched backwards (the two marked pairs hold, surest); the
    # growth goes on from there and its top 4 holds, so K = 4 is left as grown
    (both,) = _check(_graded_marked_minus_poison_box, [g], [gem], "repair", width=1,
                     backward=((0, 2), (2, 4)))
    assert _order(g, both) == [3, 4, 0, 1, 2]
    # the pairs before the previous budget stay: with start 1 the poisoned pair is fixed first;
    # with it, both marked pairs and one neutral pair hold (logit 0.5 either way): of the two
    # neutral pairs, the one Gem ranks lowest, (3, 4), is dropped
    (fixed,) = _check(_graded_marked_minus_poison_box, [g], [gem], "repair", width=1,
                      start=1, backward=((0, 4),))
    assert _order(g, fixed) == [0, 1, 3, 4, 2]
    # a span from the previous K (2): the top 2 stays as grown, the two marked pairs join it
    (late,) = _check(_graded_marked_minus_poison_box, [g], [gem], "repair", width=1,
                     backward=((2, 4),))
    assert _order(g, late) == [0, 1, 3, 4, 2]


def test_backward_costs_nothing_where_the_top_k_holds_and_keeps_a_failing_one_it_cannot_fix():
    g, gem = _poison_first()
    marked_first = torch.tensor([0.5, 0.6, 0.7, 0.9, 0.8])  # the marked pairs first: all hold
    calls = []
    box = lambda batch: calls.append(batch.num_instances) or _graded_marked_minus_poison_box(batch)
    (plain,) = _check(box, [g], [marked_first], "repair", width=1)
    n_plain = len(calls)
    (back,) = _check(box, [g], [marked_first], "repair", width=1,
                     backward=((0, 2), (2, 3), (3, 4)))
    assert torch.equal(back, plain) and len(calls) == 2 * n_plain  # not one forward more
    # a box whose prediction holds on no proper subset: backwards finds nothing, growth stays
    whole_only = lambda batch: torch.stack(
        [torch.zeros(batch.num_instances, dtype=torch.float64),
         torch.bincount(batch.batch[batch.edge_index[0]], minlength=batch.num_instances)
         .double() / 2 - 4.5], 1)
    (kept,) = _check(whole_only, [g], [gem], "repair", width=1, backward=((0, 4),))
    assert _order(g, kept) == [0, 1, 2, 3, 4]


def test_the_lead_is_put_in_the_targets_deletion_order_inside_the_smallest_explanation():
    from gem_core.gem.checked_ranking import deletion_lead

    g, gem = _poison_first()
    packed = PackedGraphs.from_instances([g])
    box = _graded_marked_minus_poison_box
    predicted = box(packed.forward_batch()).argmax(-1)  # class 1 (2 marked, 1 poisoned)
    # within the top 4 (pairs 0-3): deleting the marked (0, 1) flips the prediction first; then,
    # with it gone, deleting (2, 3) or (3, 4) leaves 1 marked against 1 poisoned (flipped; a tie,
    # the lower index goes first) while deleting the poisoned pair does not
    (out,) = packed.split_pairs(deletion_lead(box, packed, gem, predicted, lead=2, within=4))
    assert _order(g, out) == [3, 1, 0, 2, 4]
    assert sorted(out.tolist()) == sorted(gem.tolist())  # Gem's values, reassigned
    # the smallest explanation's set and every larger top-K stay as they were
    for k in (4, 5):
        assert set(_order(g, out)[:k]) == set(_order(g, gem)[:k])
    # a lead of 0 returns Gem's scores; within the top 3 no deletion flips, the poisoned pair's
    # makes the prediction surer: ties between the neutral pairs go to the lower index
    (same,) = packed.split_pairs(deletion_lead(box, packed, gem, predicted, lead=0, within=4))
    assert torch.equal(same, gem)
    (top3,) = packed.split_pairs(deletion_lead(box, packed, gem, predicted, lead=1, within=3))
    assert _order(g, top3) == [1, 0, 2, 3, 4]


def test_the_pipeline_orders_the_lead_before_the_check_grows_from_it(monkeypatch):
    """``check_lead`` asks the target even with the check off, moves the check's start past the
    lead, and is turned off with the check for a screen (``unchecked``)."""
    import gem_core.gem.explain as pipeline_module
    from gem_core.gem.pipeline import GemPipeline
    from gem_core.pyg import GemExplainer

    g, gem = _poison_first()
    packed = PackedGraphs.from_instances([g])
    box = _graded_marked_minus_poison_box
    settings = GemSettings().with_overrides({"check.lead": 2})
    assert settings.asks_target and not settings.unchecked().asks_target
    assert settings.key_parts() == GemSettings().key_parts()
    out = GemPipeline(settings, (4, 5), box, 2).check(packed, gem, torch.tensor([1]))
    assert _order(g, out) == [3, 1, 0, 2, 4]  # the lead; the check itself is off
    seen = []
    real = pipeline_module.checked_scores
    monkeypatch.setattr(pipeline_module, "checked_scores",
                        lambda *a, **kw: seen.append(kw["start"]) or real(*a, **kw))
    for lead, necessity_lead, want in ((2, 0, 2), (2, 3, 3), (0, 1, 1)):
        s = GemSettings().with_overrides({"check.rule": "repair", "check.lead": lead, "teacher.necessity_lead": necessity_lead})
        GemPipeline(s, (4, 5), box, 2).check(packed, gem, torch.tensor([1]))
        assert seen.pop() == want
    with pytest.raises(ValueError, match="GemSettings.check.lead"):
        GemSettings().with_overrides({"check.lead": -1})
    assert GemExplainer(settings={"check.lead": 4}).gem_settings("graph", 3, False).check.lead == 4
    assert GemExplainer().gem_settings("node", 3, False).check.lead == 0


@pytest.mark.parametrize("rule", ["search", "sustain", "climb"])
def test_looking_further_changes_nothing_where_repair_finds_a_pair(rule):
    a, b = _star(), _star()
    gem_b = torch.tensor([0.1, 0.2, 0.3, 0.95])
    calls = []
    box = lambda batch: calls.append(batch.num_instances) or marked_edge_box(batch)
    repaired = _check(marked_edge_box, [a, b], [GEM, gem_b], "repair", width=4)
    out = _check(box, [a, b], [GEM, gem_b], rule, width=4)
    assert all(torch.equal(x, y) for x, y in zip(repaired, out))
    # b's first pair holds at once, and so does Gem's next at every position: one forward for
    # the prediction, then one that asks Gem's next pair at all 4 positions ahead and the
    # first position's other candidate (asked ahead in case Gem's next failed) under both
    # protocols ((4 + 1) x 2 copies), and nothing past the width
    calls.clear()
    (alone,) = _check(box, [b], [gem_b], rule, width=2)
    assert torch.equal(alone, gem_b) and calls == [1, (4 + 1) * 2]


def test_a_late_rule_takes_over_from_its_position():
    g = _star()
    # width 1, repair at position 0 (Gem's failing (0, 1) stays), search from position 1: Gem's
    # (0, 2) fails, every pair left is asked, (0, 4) holds and is placed
    (out,) = _check(marked_edge_box, [g], [GEM], "repair", width=1, late=(1, "search"))
    assert _order(g, out) == [0, 3, 1, 2]
    (whole,) = _check(marked_edge_box, [g], [GEM], "repair", width=1, late=(0, "search"))
    assert _order(g, whole) == [3, 0, 1, 2]  # search from the start
    (never,) = _check(marked_edge_box, [g], [GEM], "repair", width=1, late=(9, "search"))
    assert _order(g, never) == [0, 1, 2, 3]  # repair throughout
    # a late sustain knows whether the explanation held under the early rule: (0, 1) holds
    # under repair at position 0, so where Gem's (3, 5) breaks it, the surest pair left goes next
    p = _graph([1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1],
               [(0, 1), (3, 5), (2, 3), (3, 4), (1, 2)])
    gem = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
    (kept,) = _check(_marked_minus_poison_box, [p], [gem], "repair", width=1,
                     late=(1, "sustain"))
    assert _order(p, kept) == [0, 2, 3, 4, 1]
    for bad in ("widest", "off"):
        with pytest.raises(ValueError, match="late check rule"):
            _check(marked_edge_box, [g], [GEM], "repair", late=(1, bad))


def test_best_prefers_the_surest_candidate_and_keeps_gems_order_on_ties():
    g = _star()
    # every candidate of position 0 fails alike (the same class-1 probability): Gem's first
    (out,) = _check(marked_edge_box, [g], [GEM], "best", width=2)
    assert _order(g, out)[:2] == [0, 1]


def test_pairs_before_start_and_from_stop_on_keep_gems_order():
    g = _star()
    (out,) = _check(marked_edge_box, [g], [GEM], "best", width=4, start=1)
    assert _order(g, out) == [0, 3, 1, 2]  # position 0 is Gem's, position 1 checked
    (out,) = _check(marked_edge_box, [g], [GEM], "best", width=4, start=1, stop=1)
    assert torch.equal(out, GEM)  # nothing between start and stop


def test_the_prediction_must_hold_under_both_protocols():
    # the marked-node box: class 1 iff node 3 (feature 1) is in the graph. Under keep_nodes every
    # explanation holds; under drop_isolated only one with a pair at node 3
    g = _graph([0, 0, 0, 0], [0, 0, 0, 1], [(0, 1), (1, 2), (2, 3)])
    gem = torch.tensor([0.9, 0.8, 0.7])
    (out,) = _check(marked_node_box, [g], [gem], "repair", width=3)
    assert _order(g, out)[0] == 2  # (2, 3): the only pair the prediction holds on, both ways


@pytest.mark.parametrize("teacher, protocol, first", [
    ("keep_nodes", "both", 2),  # must hold under drop_isolated too: (2, 3) first
    ("drop_isolated", "both", 2),
    ("drop_isolated", "taught", 2),  # judged as taught: (2, 3) first
    ("keep_nodes", "taught", 0),  # under keep_nodes every explanation holds: Gem's order
])
def test_the_check_judges_under_the_protocol_gem_is_taught_for_when_told(teacher, protocol, first):
    from gem_core.data.protocol import PROTOCOLS
    from gem_core.gem.explain import check_plan
    from gem_core.gem.pipeline import GemPipeline

    g = _graph([0, 0, 0, 0], [0, 0, 0, 1], [(0, 1), (1, 2), (2, 3)])
    gem = torch.tensor([0.9, 0.8, 0.7])
    settings = GemSettings().with_overrides({
        "check.rule": "repair", "teacher.protocol": teacher, "check.protocol": protocol})
    packed = PackedGraphs.from_instances([g])
    out = GemPipeline(settings, (1, 2, 3), marked_node_box, 2).check(packed, gem, torch.tensor([1]))
    assert _order(g, out)[0] == first
    want = PROTOCOLS if protocol == "both" else (teacher,)
    assert check_plan(settings, (1, 2, 3)).protocols == want


def test_the_adapters_presets_check_under_the_protocol_they_teach():
    from gem_core.gem.presets import preset

    for level in ("node", "graph"):
        adapter = preset(level)
        assert str(adapter.check.protocol) == "taught"
        assert str(adapter.teacher.protocol) == "drop_isolated"
    assert str(GemSettings().check.protocol) == "both"  # the engine's datasets: both protocols
    with pytest.raises(ValueError, match="GemSettings.check.protocol"):
        GemSettings().with_overrides({"check.protocol": "drop_isolated"})
    taught = GemSettings().with_overrides({"check.protocol": "taught"})
    assert taught.key_parts() == GemSettings().key_parts()  # read when explaining only


def test_many_instances_in_one_pass_each_checked_on_its_own():
    a, b = _star(), _star()
    gem_b = torch.tensor([0.1, 0.2, 0.3, 0.95])  # Gem already ranks (0, 4) first here
    out_a, out_b = _check(marked_edge_box, [a, b], [GEM, gem_b], "repair", width=4)
    assert _order(a, out_a) == [3, 0, 1, 2]
    assert torch.equal(out_b, gem_b)  # its first pair holds: Gem's order throughout


def test_the_target_may_be_asked_in_node_bounded_runs_of_copies(monkeypatch):
    """On the CPU the copies are judged in runs of at most NODES_PER_FORWARD nodes (cache-sized
    forwards); a run boundary between copies changes no decision."""
    from gem_core.gem import checked_ranking

    insts = [_star() for _ in range(7)]
    gen = torch.Generator().manual_seed(0)
    scores = [torch.rand(4, generator=gen) for _ in insts]
    predicted = marked_edge_box(PackedGraphs.from_instances(insts).forward_batch()).argmax(-1)
    whole = _check(marked_edge_box, insts, scores, "best", width=3, predicted=predicted)
    monkeypatch.setattr(checked_ranking, "NODES_PER_FORWARD", 6)  # about one copy per run
    calls = []
    box = lambda batch: calls.append(batch.num_instances) or marked_edge_box(batch)
    runs = _check(box, insts, scores, "best", width=3, predicted=predicted)
    assert all(torch.equal(a, b) for a, b in zip(whole, runs))
    assert max(calls) < 7 and len(calls) > 8  # the copies were asked in several forwards


def test_node_task_copies_keep_their_target():
    # node 0 is the target; class 1 iff the marked pair (0, 4) is kept (the target row is read)
    g = _graph([1, 0, 0, 0, 1], [0, 0, 0, 0, 0], [(0, 1), (0, 2), (0, 3), (0, 4)], target=0)
    (out,) = _check(marked_edge_box, [g], [GEM], "repair", width=4)
    assert _order(g, out)[0] == 3


def test_ties_in_gems_scores_cannot_undo_the_checked_order_and_stay_where_it_keeps_them():
    g = _star()
    tied = torch.tensor([0.5, 0.5, 0.5, 0.5])
    (out,) = _check(marked_edge_box, [g], [tied], "repair", width=4)
    assert _order(g, out) == [3, 0, 1, 2]
    # (0, 4) moved ahead of its tied peers; the three it passed keep their tie (index order)
    assert float(out[3]) == 0.5 and float(out[0]) < 0.5
    assert float(out[0]) == float(out[1]) == float(out[2])
    # where the check keeps Gem's order, Gem's ties (symmetric bonds) stay ties
    b = _graph([1, 0, 0, 0, 1], [0, 0, 0, 0, 0], [(0, 4), (0, 1), (0, 2), (0, 3)])
    (kept,) = _check(marked_edge_box, [b], [tied], "repair", width=4)
    assert torch.equal(kept, tied)


def test_bad_arguments_are_refused():
    g = _star()
    with pytest.raises(ValueError, match="check rule"):
        _check(marked_edge_box, [g], [GEM], "sometimes")
    with pytest.raises(ValueError, match="width"):
        _check(marked_edge_box, [g], [GEM], "best", width=0)
    with pytest.raises(ValueError, match="scores for"):
        checked_scores(marked_edge_box, PackedGraphs.from_instances([g]), GEM[:3],
                       torch.tensor([1]), start=0, stop=4, width=2, rule="best")


def test_settings_validate_the_check_and_leave_a_fits_key_alone():
    with pytest.raises(ValueError, match="GemSettings.check"):
        GemSettings().with_overrides({"check.rule": "sometimes"})
    with pytest.raises(ValueError, match="GemSettings.check.width"):
        GemSettings().with_overrides({"check.width": 0})
    with pytest.raises(ValueError, match="GemSettings.check.late"):
        GemSettings().with_overrides({"check.late": "off"})  # "same" keeps the check's own rule
    plain = GemSettings()
    checked = plain.with_overrides({"check.rule": "best", "check.width": 5, "check.late": "search"})
    # the check is read at explain time only: a fitted Gem is the same, so is its saved key
    assert checked.key_parts() == plain.key_parts()
    assert str(checked.check.rule) == "best" and str(checked.check.late) == "search"
    assert plain.check.late is None  # the check's own rule throughout


def test_the_pipeline_hands_the_late_rule_from_the_grids_smallest_k(monkeypatch):
    """``check_late`` reaches the check as ``(max(min K, necessity_lead), rule)``; ``same``
    as no late rule at all; the PyG adapter passes its option of the same name."""
    import gem_core.gem.explain as pipeline_module
    from gem_core.gem.pipeline import GemPipeline
    from gem_core.pyg import GemExplainer

    seen = []
    monkeypatch.setattr(pipeline_module, "checked_scores",
                        lambda *a, **kw: seen.append(kw["late"] and (kw["late"][0],
                                                                     kw["late"][1].name)) or a[2])
    g = _star()
    packed = PackedGraphs.from_instances([g])
    for late, lead, want in (("same", 0, None), ("search", 0, (2, "search")),
                             ("sustain", 3, (3, "sustain"))):
        settings = GemSettings().with_overrides({"check.rule": "repair", "check.late": late, "teacher.necessity_lead": lead})
        GemPipeline(settings, (2, 4), marked_edge_box, 2).check(packed, GEM, torch.tensor([1]))
        assert seen.pop() == want
    late = GemExplainer(settings={"check.late": "search"}).gem_settings("graph", 3, False)
    assert late.check.late.name == "search"
    assert GemExplainer().gem_settings("node", 3, False).check.late is None


def test_the_pipeline_hands_the_grid_to_the_backward_search(monkeypatch):
    """``check_backward`` reaches the check as the pipeline's K grid (``grid``), the grid past
    its smallest K (``late``) or nothing (``off``); it leaves a fit's key alone; the PyG adapter
    passes its option of the same name."""
    import gem_core.gem.explain as pipeline_module
    from gem_core.gem.pipeline import GemPipeline
    from gem_core.pyg import GemExplainer

    seen = []
    monkeypatch.setattr(pipeline_module, "checked_scores",
                        lambda *a, **kw: seen.append(kw["backward"]) or a[2])
    packed = PackedGraphs.from_instances([_star()])
    for backward, want in (("off", ()), ("grid", ((0, 2), (2, 3), (3, 4))),
                           ("late", ((2, 3), (3, 4)))):
        settings = GemSettings().with_overrides({"check.rule": "repair", "check.backward": backward})
        GemPipeline(settings, (4, 2, 3), marked_edge_box, 2).check(packed, GEM, torch.tensor([1]))
        assert seen.pop() == want
    with pytest.raises(ValueError, match="GemSettings.check.backward"):
        GemSettings().with_overrides({"check.backward": "sometimes"})
    assert GemSettings().with_overrides({"check.backward": "grid"}).key_parts() == GemSettings().key_parts()
    back = GemExplainer(settings={"check.backward": "late"}).gem_settings("graph", 3, False)
    assert back.check.backward.name == "late"
    assert GemExplainer().gem_settings("node", 3, False).check.backward.name == "off"


@requires_mutagenicity
def test_the_shipped_mutagenicity_gem_checks_its_ranking_and_gains_sufficiency():
    """The engine's Gem + check on Mutagenicity checks Gem's ranking after the necessity lead
    (the row's choice): the lead stays Gem's, every explanation keeps Gem's values, and on
    validation molecules the checked top-K is sufficient at least as often as Gem's one-pass
    top-K (the registry's Gem, the same fit)."""
    from gem_core.evaluation.faithfulness import sufficiency_at_k
    from gem_core.models.predict import predict_proba
    from gem_core.service.session import Workbench

    wb = Workbench("mutagenicity", "cpu")
    assert not wb.explainer("gem").settings.asks_target  # Gem alone never asks the target
    exp = wb.explainer("gem_check")
    settings = exp.settings
    assert str(settings.check.rule) == "climb" and settings.teacher.necessity_lead == 5
    insts = wb.instances("val")[:80]
    predicted = predict_proba(wb.black_box, insts).argmax(-1)
    checked = exp.explain(insts, predicted=predicted).scores
    exp.settings = settings.with_overrides({"check.rule": "off"})
    try:
        plain = exp.explain(insts, predicted=predicted).scores
    finally:
        exp.settings = settings
    for c, p, inst in zip(checked, plain, insts):
        assert ranked_pairs(c, 5) == ranked_pairs(p, 5)  # the lead is Gem's
        assert sorted(c.tolist()) == pytest.approx(sorted(p.tolist()), abs=1e-5)  # ties: ulps
    ks = [15, 20, 25]
    for protocol in ("keep_nodes", "drop_isolated"):
        got = sufficiency_at_k(wb.black_box, (insts, checked), ks, protocol, predicted=predicted)
        was = sufficiency_at_k(wb.black_box, (insts, plain), ks, protocol, predicted=predicted)
        assert all(got.at_k[k] >= was.at_k[k] for k in ks), (protocol, got.at_k, was.at_k)
        assert sum(got.at_k.values()) > sum(was.at_k.values())
    # climb looks past the width only where repair finds nothing: at least as sufficient
    exp.settings = settings.with_overrides({"check.rule": "repair"})
    try:
        repaired = exp.explain(insts, predicted=predicted).scores
    finally:
        exp.settings = settings
    for protocol in ("keep_nodes", "drop_isolated"):
        got = sufficiency_at_k(wb.black_box, (insts, checked), ks, protocol, predicted=predicted)
        was = sufficiency_at_k(wb.black_box, (insts, repaired), ks, protocol, predicted=predicted)
        assert sum(got.at_k.values()) >= sum(was.at_k.values()), (protocol, got.at_k, was.at_k)


@requires_mutagenicity
@pytest.mark.parametrize("rule, late, backward, width", [
    ("repair", None, (), 3), ("repair", None, (), 8), ("repair", (6, "search"), (), 8),
    ("best", None, (), 3), ("search", (10, "sustain"), ((0, 10), (10, 15)), 3),
    ("sustain", (8, "climb"), ((8, 12),), 3), ("climb", None, ((0, 15),), 3)])
def test_asking_ahead_changes_no_ranking(monkeypatch, rule, late, backward, width):
    """The lookahead (Gem's next pairs asked for many positions in one forward, the other
    candidates of the positions where they fail asked ahead too, and runs of positions where no
    candidate holds passed at once) is a way to ask fewer forwards, not another check: on the
    shipped Mutagenicity target, with random scores
    (so the check leaves Gem's order often), every rule gives the same scores as asking one
    position at a time, for a batch and for molecules explained one per call (the PyG door).
    (A batch and one-per-call are not compared: the target's float rounding depends on the
    batch, which may swap near-equal candidates.)"""
    from gem_core.gem import checked_ranking
    from gem_core.service.session import Workbench

    wb = Workbench("mutagenicity", "cpu")
    insts = wb.instances("val")[:16]
    packed = PackedGraphs.from_instances(insts)
    scores = torch.rand(packed.num_pairs, generator=torch.Generator().manual_seed(7))
    predicted = wb.predict_proba(insts).argmax(-1)

    def run(instances, flat, pred):
        p = PackedGraphs.from_instances(instances)
        return checked_scores(wb.black_box, p, flat, pred, start=2, stop=15, width=width,
                              rule=rule, late=late, backward=backward)

    def one_per_call():
        return torch.cat([run([inst], part, predicted[i:i + 1])
                          for i, (inst, part) in enumerate(zip(insts, packed.split_pairs(scores)))])

    ahead_batch, ahead_alone = run(insts, scores, predicted), one_per_call()
    monkeypatch.setattr(checked_ranking._Lookahead, "nodes_per_forward", 1)
    assert torch.equal(ahead_batch, run(insts, scores, predicted))
    assert torch.equal(ahead_alone, one_per_call())


def _values_along_by_position(gem: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The reassignment rule read literally, one position after another."""
    values = gem.clone()
    for r in range(1, gem.numel()):
        if gem[r] == gem[r - 1] and int(order[r]) > int(order[r - 1]):
            values[r] = values[r - 1]
        elif values[r] >= values[r - 1]:
            values[r] = torch.nextafter(values[r - 1], torch.tensor(float("-inf")))
    return values


def test_values_along_rows_is_the_rule_position_by_position():
    """The running-minimum form gives every instance the values the rule gives it one position
    at a time: ties kept in index order, one float step down elsewhere (cascading), on values
    with many ties, adjacent floats, zeros and negatives."""
    from gem_core.gem.checked_ranking import values_along, values_along_rows

    gen = torch.Generator().manual_seed(0)
    for trial in range(400):
        n = int(torch.randint(1, 4, (1,), generator=gen))
        w = int(torch.randint(1, 25, (1,), generator=gen))
        raw = torch.randint(-2, 4, (n, w), generator=gen).float() / 4  # zeros, negatives, ties
        if trial % 4 == 0 and w > 1:  # a value one float step from its neighbour
            raw[:, -1] = torch.nextafter(raw[:, 0], torch.tensor(float("-inf")))
        gem = torch.sort(raw, dim=1, descending=True).values
        order = torch.stack([torch.randperm(w, generator=gen) for _ in range(n)])
        rows = values_along_rows(gem, order)
        for i in range(n):
            expected = _values_along_by_position(gem[i], order[i])
            assert torch.equal(rows[i], expected), (gem[i], order[i])
            assert torch.equal(values_along(gem[i], order[i]), expected)
