"""The top-K policy names, the rules that need no forward pass (``nosplit``, ``exact``,
``paper``) and the fill-up.

From the pairs the greedy phase kept, while more than K remain, remove a remaining pair of low
weight (ties: lower index), applying the connectivity rule again. Appendix C removes the
lowest-weight pair every time (``"paper"``); since a removal can split off a component, that
often ends well below K pairs. ``"nosplit"`` removes the lowest-weight pair whose removal splits
nothing off, which keeps the explanation connected and uses the whole budget; ``"exact"``
accepts only removals leaving at least K pairs. The loss-driven ``"refine"`` is in
:mod:`.refine`; the entry points are :meth:`Distillation.topk` and :meth:`Distillation.topk_grid`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gem_core.data.packed import segment_arange, segment_ptr
from gem_core.gem.distill.conventions import order_key
from gem_core.gem.distill.fields import DistillationFields
from gem_core.gem.distill.segments import _np_segment_order
from gem_core.gem.distill.walk import _pair_owner, _Walk

TOPK_POLICIES: tuple[str, ...] = ("nosplit", "exact", "paper", "refine", "sufficient")
# The default of Distillation.topk: the best forward-free policy on Mutagenicity (train, val and
# test splits); "paper" is Appendix C taken literally. See Distillation.topk.
DEFAULT_TOPK_POLICY = "nosplit"
# The policy the distillation accuracy is reported with (`distill` CLI default, `reproduce`): the
# loss-driven "refine" (Mutagenicity test 96.3 / 97.0 / 97.9 / 97.9 % at K = 15 / 20 / 25 / 30,
# against nosplit's 83.4 / 88.7 / 91.2 / 94.5), at the price of forward passes in the top-K phase.
ACCURACY_TOPK_POLICY = "refine"


def check_topk_policy(policy: str) -> str:
    """Validate a top-K policy name (one of :data:`TOPK_POLICIES`)."""
    if policy not in TOPK_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(TOPK_POLICIES)}; got {policy!r}.")
    return policy


# The policies a policy falls back to, in order, while an instance still has more than K pairs.
_POLICY_CHAIN = {
    "nosplit": ("nosplit", "exact", "paper"),
    "exact": ("exact", "paper"),
    "paper": ("paper",),
}


def _topk_flat(dist: DistillationFields, k: int, policy: str, fill: bool) -> Tensor:
    """Flat top-K mask over all pairs of ``dist`` (see :meth:`Distillation.topk`)."""
    kept = dist.kept.clone()
    owner = _pair_owner(dist)
    count = torch.zeros(len(dist), dtype=torch.long).scatter_add_(0, owner, kept.long())
    over = count > k
    if bool(over.any()):
        if dist.connected:
            kept = _prune_connected(dist, kept, owner, over, k, policy)
        else:
            # Removals never cascade, so every policy drops the count − k lowest-weight pairs.
            cand = torch.nonzero(kept & over[owner]).view(-1)
            cand = cand[_np_segment_order(order_key(dist.weights[cand], dist.tol), owner[cand])]
            cand_owner = owner[cand]
            rank = segment_arange(torch.bincount(cand_owner, minlength=len(dist))[over])
            kept[cand[rank < (count[cand_owner] - k)]] = False
    if fill:
        kept = _fill_flat(dist, kept, owner, k)
    return kept


# Pairs (summed over the trial copies) one step of a top-K walk may test at once.
TRIAL_BUDGET = 32_768


def _walk(w: _Walk, k: int, mode: str, out: np.ndarray) -> _Walk:
    """One removal walk for every instance of ``w`` in lockstep (no forward pass).

    Each instance walks its remaining pairs in ascending (weight, index) order while it has more
    than ``k`` pairs, tentatively removing its current pair and applying the connectivity rule.
    ``mode`` decides which removals are accepted:

    - ``"paper"``: every one (Appendix C, literally);
    - ``"exact"``: those leaving at least ``k`` pairs; the walk starts a new pass after a pass
      that accepted something and ends after a pass that accepted nothing;
    - ``"nosplit"``: those dropping no other pair; after an accepted removal the walk restarts
      from the lowest-weight remaining pair (so each removal takes the lowest-weight pair whose
      removal splits nothing off). Instances whose pairs are not the one component the rule
      keeps (a disconnected graph the greedy phase left untouched) are left to the next policy.

    A rejected trial leaves the instance unchanged, so one step tests each instance's next few
    pairs at once (copies of the instance, within :data:`TRIAL_BUDGET` pairs per step) and takes
    the first accepted one: the same result as trying them one by one. The result is written to
    ``out`` (flat, at ``w.pos``); returns the walk of the instances still over budget.
    """
    ptr = np.zeros(w.n, dtype=np.int64)  # walk position within the instance's pairs
    moved = np.zeros(w.n, dtype=bool)  # "exact": accepted something in the current pass
    run = w.count > k
    if mode == "nosplit":
        run &= w.is_ruled()
    while True:
        keep = run | (w.count > k)  # busy, or needed by the next policy
        if w.n > 64 and 2 * int(keep.sum()) < w.n:  # compact to those instances
            out[w.pos] = w.alive
            w = w.subset(keep)
            ptr, moved, run = ptr[keep], moved[keep], run[keep]
        start, end = w.pair_ptr[:-1], w.pair_ptr[1:]
        nxt = w.next_alive()
        first = np.minimum(nxt[np.minimum(start + ptr, end)], end)
        at_end = run & (first >= end)
        if mode == "exact":
            again = at_end & moved
            ptr[again], moved[again] = 0, False
            first = np.where(again, np.minimum(nxt[start], end), first)
            run &= ~(at_end & ~again)
        else:
            run &= ~at_end
        if not run.any():
            break
        # the trials: each running instance's next `width` alive pairs from `first` on
        width = 1 if mode == "paper" else max(1, TRIAL_BUDGET // int(w.count[run].sum()))
        at = np.arange(w.pos.shape[0])
        ahead = w.alive & run[w.owner] & (at >= first[w.owner])
        rank = np.cumsum(ahead) - 1
        rank -= np.concatenate([[0], np.cumsum(ahead)])[start][w.owner]
        removed = np.flatnonzero(ahead & (rank < width))
        inst = w.owner[removed]
        src, kept, copy_of = w.trials(removed, inst)
        after = np.bincount(copy_of, weights=kept, minlength=removed.shape[0]).astype(np.int64)
        if mode == "paper":
            ok = np.ones(removed.shape[0], dtype=bool)
        elif mode == "exact":
            ok = after >= k
        else:
            ok = after == w.count[inst] - 1
        hit = np.flatnonzero(ok)
        _, first_hit = np.unique(inst[hit], return_index=True)
        chosen = hit[first_hit]  # the first accepted trial of each instance (copies are in order)
        accept = np.zeros(w.n, dtype=bool)
        accept[inst[chosen]] = True
        # rejected everywhere: move past the last trial; accepted: past the removed pair
        last = np.zeros(w.n, dtype=np.int64)
        np.maximum.at(last, inst, removed)
        last[inst[chosen]] = removed[chosen]
        win = np.zeros(removed.shape[0], dtype=bool)
        win[chosen] = True
        w.alive = np.where(accept[w.owner], False, w.alive)
        w.alive[src[kept & win[copy_of]]] = True
        w.count[inst[chosen]] = after[chosen]
        ptr = np.where(run, last - start + 1, ptr)
        if mode == "nosplit" and accept.any():
            ptr = _nosplit_rewind(w, accept, last, ptr)
        moved |= accept
        run &= w.count > k
    out[w.pos] = w.alive
    return w.subset(w.count > k)


def _nosplit_rewind(w: _Walk, accept: np.ndarray, cand: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Where the ``"nosplit"`` walk resumes after the removals ``cand[accept]``.

    The rule is "restart from the lowest-weight remaining pair", but every remaining pair before
    the removed one was just found to split something off, i.e. it is a bridge that is not a
    pendant edge (in a connected graph a removal drops nothing else exactly when the pair lies
    on a cycle or hangs off a leaf other than the target). Removals never create cycles, so such
    a pair becomes removable only by turning into a pendant edge, which needs a removal at one
    of its endpoints. The walk therefore resumes at the first remaining pair before the removed
    one that shares an endpoint with it, else right after it. (The reference restarts from the
    lowest-weight pair; the tests check that both agree.)
    """
    owner, start = w.owner, w.pair_ptr[:-1]
    m = owner.shape[0]
    a = np.full(w.n, -1, dtype=np.int64)
    b = np.full(w.n, -1, dtype=np.int64)
    a[accept], b[accept] = w.u[cand[accept]], w.v[cand[accept]]
    ao, bo = a[owner], b[owner]
    at = np.arange(m)
    touch = (
        w.alive
        & accept[owner]
        & (at < cand[owner])
        & ((w.u == ao) | (w.u == bo) | (w.v == ao) | (w.v == bo))
    )
    first = np.full(w.n, m, dtype=np.int64)
    np.minimum.at(first, owner[touch], at[touch])
    out = ptr.copy()
    out[accept] = np.minimum(first[accept], cand[accept] + 1) - start[accept]
    return out


def _prune_connected(
    dist: DistillationFields, kept: Tensor, owner: Tensor, over: Tensor, k: int, policy: str
) -> Tensor:
    """Top-K with the connectivity rule for the instances ``over`` budget (no forward pass)."""
    out = kept.numpy().copy()
    w = _Walk.build(dist, kept, owner, over)
    for mode in _POLICY_CHAIN[policy]:
        w = _walk(w, k, mode, out)
        if w.n == 0:
            break
    return torch.from_numpy(out)


def _fill_flat(dist: DistillationFields, kept: Tensor, owner: Tensor, k: int) -> Tensor:
    """Fill-up: add the highest-Δ missing pairs to explanations with fewer than ``k`` pairs.

    Without the connectivity rule the ``k − count`` highest-Δ missing pairs are added. With it,
    pairs are added one at a time: the highest-Δ missing pair touching the explanation (a node of
    its pairs, or the target node); an empty graph-task explanation starts from the highest-Δ
    pair. Ties: lower pair index. Stops at ``k`` pairs or when no pair can be added.
    """
    kept = kept.clone()
    count = torch.zeros(len(dist), dtype=torch.long).scatter_add_(0, owner, kept.long())
    need = (count < k) & (dist.num_pairs > count)
    if not bool(need.any()):
        return kept
    cand = torch.nonzero(~kept & need[owner]).view(-1)
    cand = cand[_np_segment_order(order_key(-dist.delta[cand], dist.tol), owner[cand])]
    cand_owner = owner[cand]
    if not dist.connected:
        rank = segment_arange(torch.bincount(cand_owner, minlength=len(dist))[need])
        kept[cand[rank < (k - count[cand_owner])]] = True
        return kept
    node_ptr = segment_ptr(dist.num_nodes)
    node_off = node_ptr[:-1]
    cu = (dist.pairs[0, cand] + node_off[cand_owner]).numpy()
    cv = (dist.pairs[1, cand] + node_off[cand_owner]).numpy()
    cown = cand_owner.numpy()
    in_set = np.zeros(int(node_ptr[-1]), dtype=bool)
    kept_ids = torch.nonzero(kept).view(-1)
    kept_off = node_off[owner[kept_ids]]
    in_set[(dist.pairs[0, kept_ids] + kept_off).numpy()] = True
    in_set[(dist.pairs[1, kept_ids] + kept_off).numpy()] = True
    node_task = bool((dist.targets >= 0).any())
    if node_task:
        in_set[(node_off + dist.targets).numpy()] = True
    empty = (count == 0).numpy() & (not node_task)  # may start anywhere
    missing = (k - count).numpy()
    taken = np.zeros(cu.shape[0], dtype=bool)
    while True:
        ok = ~taken & (missing[cown] > 0) & (in_set[cu] | in_set[cv] | empty[cown])
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            break
        _, first = np.unique(cown[idx], return_index=True)  # the best candidate per instance
        pick = idx[first]
        taken[pick] = True
        in_set[cu[pick]] = True
        in_set[cv[pick]] = True
        empty[cown[pick]] = False
        missing[cown[pick]] -= 1
    kept[cand[torch.from_numpy(taken)]] = True
    return kept
