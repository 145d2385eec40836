"""Gem proposes, the target checks: a ranking of Gem's pairs grown with the target's outputs.

Gem's auto-encoder scores every pair in one forward pass; its top-k is what an explanation keeps
at budget k. A small fragment can look like another class to the target (the "small-fragment
bias" of molecule classifiers), so a top-k that Gem ranks well may still not be *sufficient*: the
target predicts something else on it. The check (a deviation from the paper, off unless a
setting turns it on) reorders Gem's ranking between two positions ``start`` and ``stop``: at each
position it looks at the ``width`` best pairs Gem has not placed yet, asks the target, in one
batched forward per protocol for every instance at once, what it predicts on the explanation so
far plus each of them, and places

* ``repair``: Gem's own next pair, unless the target's prediction does not hold on it while it
  holds with another candidate (then the candidate with the highest probability of the
  predicted class among those that hold);
* ``best``: the candidate whose explanation holds with the highest probability of the predicted
  class (ties: Gem's order);
* ``search``: ``repair``, and where the prediction holds on none of the ``width`` candidates,
  every pair Gem has not placed yet is asked too; the surest one it holds on is placed (Gem's
  next pair when there is none);
* ``sustain``: ``repair``, and once the explanation holds it is kept as close to holding as one
  pair can keep it: where the prediction held on the explanation so far and holds on none of
  the ``width`` candidates, the surest of every pair not placed yet is placed;
* ``climb``: ``search``, and where the prediction holds on no pair at all, the surest pair is
  placed instead of Gem's next one: the explanation climbs toward holding, one pair at a time,
  at ``search``'s cost.

``search``, ``sustain`` and ``climb`` change only the positions where ``repair`` finds nothing;
the extra forwards are spent on those instances alone. A ``late`` rule may take over from a
position on (the engine's: from the grid's smallest K, past the explanation whose stability is
measured).

Growing one pair at a time cannot look ahead: where K is close to an instance's size, the
explanation that holds may be "all but one bond", a set the growth never reaches when that bond
is among the first it placed. ``backward`` budgets (the grid's K) get a second way in: where the
checked top-K does not hold, the pairs after the previous budget are dropped from the whole
instance instead, each step the ones whose removal alone leaves the prediction surest (a tenth
of those above K, at least one: one at a time near K), until K pairs are left; when the
prediction holds on those, they become positions previous K to K (in the order the growth had
them, the others in Gem's order), and the growth goes on from there. An instance whose top-K
holds costs nothing more. Before all this, :func:`deletion_lead` may let the target order the
first pairs of Gem's smallest explanation by deletion (necessity).

"Holds" means the target predicts the class it predicts on the whole instance, under both
evaluation protocols (``keep_nodes`` and ``drop_isolated``; ``check.protocol = "taught"``: only the
one Gem is taught for, one copy per question); the probability compared is the lower of the two. A
regressor (``predicted`` holds its values, a floating tensor): "holds" means its value stays within
the black box's ``tolerance`` of the whole instance's (the PyG adapter's: 0.1 times the spread of
the model's outputs on the fit instances, the yardstick's), and in place of a probability the check
compares the closeness ``1 - min(|v - v_whole| / (10 tolerance), 1)``. Pairs before ``start``
(Gem's necessity lead) and after ``stop`` keep Gem's order. Only the target's outputs are read, so
Gem stays model-agnostic; the cost is ``stop - start`` batched forwards of the target per protocol,
on ``width`` copies of each instance (``repair``: on one copy, Gem's next pair, and on the other
candidates only of the instances where it fails).

The returned scores are Gem's own values, reassigned along the new order (the best score to the
first pair, …) and made strictly decreasing there, so that every top-k reads the checked order.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from gem_core.data.packed import InstanceBatch, PackedGraphs
from gem_core.data.protocol import PROTOCOLS, Protocol
from gem_core.data.ranking import pair_order
from gem_core.gem.check_rules import BEST, CheckRule, check_rule
from gem_core.gem.necessity_order import necessity_order_packed
from gem_core.models.predict import NODES_PER_FORWARD, forward_slices


def checked_scores(
    black_box,
    packed: PackedGraphs,
    scores: Tensor,
    predicted: Tensor,
    *,
    start: int,
    stop: int,
    width: int,
    rule: Union[CheckRule, str],
    protocols: tuple[str, ...] = PROTOCOLS,
    late: Optional[tuple[int, Union[CheckRule, str]]] = None,
    backward: tuple[tuple[int, int], ...] = (),
) -> Tensor:
    """Gem's flat pair ``scores`` of the ``packed`` instances, reordered by the check.

    Args:
        black_box: the target, ``InstanceBatch -> logits [B, C]`` (outputs only).
        packed: the explained instances (their own features: what the target reads).
        scores: Gem's score of every packed pair, ``[P]``.
        predicted: the target's class on each whole instance, ``[B]``.
        start / stop: the positions of the ranking the check decides (``start`` ≥ 0; pairs
            ranked before ``start`` or from ``stop`` on keep Gem's order).
        width: how many of Gem's next pairs are candidates at each position (≥ 1).
        rule: a :class:`~gem_core.gem.check_rules.CheckRule` or its name (``"repair"``,
            ``"best"``, ``"search"``, ``"sustain"``, ``"climb"``; see the module docstring);
            ``off`` returns ``scores`` unchanged.
        protocols: the protocols under which the prediction must hold.
        late: ``(position, rule)``: from that position on, that rule instead of ``rule``.
        backward: ``(previous, K)`` spans (K between ``start`` and ``stop``): where the top-K
            does not hold, positions ``max(previous, start)`` to K are searched again
            backwards from the whole instance (module docstring).
    Returns:
        ``[P]`` float32 scores, the same values as ``scores`` in another order.
    """
    rule = _rule(rule, "check rule")
    if late is not None:
        late = (int(late[0]), _rule(late[1], "late check rule"))
        if not late[1].asks_target:
            raise ValueError(f"late check rule {late[1].name!r} must ask the target")
    if int(width) < 1:
        raise ValueError(f"check width must be at least 1, got {width}")
    scores = torch.as_tensor(scores, dtype=torch.float32).reshape(-1).cpu()
    if scores.numel() != packed.num_pairs:
        raise ValueError(f"{scores.numel()} scores for {packed.num_pairs} pairs")
    if not rule.asks_target or packed.num_pairs == 0 or stop <= start:
        return scores
    order = _gem_order(packed, scores)  # [B, Pmax] local pair ids, -1 padded
    counts = packed.pair_counts()
    start = max(int(start), 0)
    spans = {
        int(k): max(int(previous), start) for previous, k in backward if start < int(k) <= int(stop)
    }
    ranking = _check(
        black_box,
        packed,
        order,
        counts,
        _as_predicted(predicted),
        start,
        int(stop),
        int(width),
        rule,
        protocols,
        late,
        spans,
    )
    return reassign_scores(packed, scores, ranking, counts)


def _as_predicted(predicted: Tensor) -> Tensor:
    """The target's classes (long), or a regressor's values (float64), on the CPU."""
    t = torch.as_tensor(predicted).reshape(-1).cpu()
    return t.double() if t.is_floating_point() else t.long()


def _rule(value: Union[CheckRule, str], what: str) -> CheckRule:
    try:
        return check_rule(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _gem_order(packed: PackedGraphs, scores: Tensor) -> Tensor:
    """Each instance's pairs in Gem's order (best first, ties to the lower pair index), as
    local pair ids in a ``[B, Pmax]`` table padded with -1."""
    counts = packed.pair_counts()
    n, width = packed.num_instances, int(counts.max()) if counts.numel() else 0
    order = torch.full((n, max(width, 1)), -1, dtype=torch.long)
    for i, part in enumerate(packed.split_pairs(scores)):
        order[i, : part.numel()] = torch.sort(part.double(), descending=True, stable=True).indices
    return order


def _check(
    black_box,
    packed: PackedGraphs,
    order: Tensor,
    counts: Tensor,
    predicted: Tensor,
    start: int,
    stop: int,
    width: int,
    first_rule: CheckRule,
    protocols: tuple[str, ...],
    late: Optional[tuple[int, CheckRule]] = None,
    backward: Optional[dict[int, int]] = None,
) -> Tensor:
    """The checked order: ``order`` with positions ``start`` to ``stop`` decided by the
    target, one position for every instance at a time. ``repair`` asks first about Gem's next
    pair alone and about the other candidates only where it fails (most positions cost one copy
    per instance instead of ``width``)."""
    n, cols = order.shape
    ranking = order.clone()
    placed = torch.zeros(n, cols, dtype=torch.bool)  # over columns of ``order``
    placed[:, :start] = True
    judge = _Judge(black_box, packed, ranking, predicted, protocols)
    ahead = _Lookahead(judge, order, ranking, placed, counts, stop, width)
    held = torch.zeros(n, dtype=torch.bool)  # the explanation so far holds (sustain)
    pos, end = start, min(stop, cols)
    while pos < end:
        rule = late[1] if late is not None and pos >= late[0] else first_rule
        active = torch.nonzero(counts > pos).view(-1)
        if active.numel() == 0:
            break
        # where the answers asked ahead say that Gem's next pairs hold for every instance, the
        # check places them (what the position-by-position rules do when Gem's next pair holds)
        last_held: Optional[Tensor] = None
        if rule.compares_all:
            run = 0
        elif rule.looks_further or backward:
            run = ahead.holding_run(active, pos)
        else:  # repair: also through positions where no candidate holds (Gem's next placed)
            run, last_held = ahead.passing_run(active, pos)
        if late is not None and pos < late[0]:
            if run > late[0] - pos:  # the late rule decides from its position on
                run, last_held = late[0] - pos, ahead.held_at(active, late[0] - 1)
        if run > 0:
            free = ~placed[active, : pos + run] & (order[active, : pos + run] >= 0)
            r, c = torch.nonzero(free & (torch.cumsum(free.long(), 1) <= run), as_tuple=True)
            ranking[active, pos : pos + run] = order[active[r], c].view(-1, run)
            placed[active[r], c] = True
            held[active] = True if last_held is None else last_held
            pos += run
            continue
        # the first `width` columns of Gem's order not placed yet (they lie before pos + width)
        span = min(pos + width, cols)
        free = ~placed[active, :span] & (order[active, :span] >= 0)
        rank = torch.cumsum(free.long(), 1)
        is_cand = free & (rank <= width)
        row, col = torch.nonzero(is_cand, as_tuple=True)  # row-major: Gem's order within a row
        if row.numel() == 0:
            break
        holds = torch.zeros(row.numel(), dtype=torch.bool)
        prob = torch.full((row.numel(),), -1.0, dtype=torch.float64)
        if not rule.compares_all:  # Gem's next pair first; the others only where it fails
            first = rank[row, col] == 1
            asked = torch.nonzero(first).view(-1)
            holds[asked], prob[asked] = ahead.next_pair(
                active[row[asked]], order[active[row[asked]], col[asked]], pos
            )
            failed = torch.zeros(len(active), dtype=torch.bool)
            failed[row[asked]] = ~holds[asked]
            asked = torch.nonzero(~first & failed[row]).view(-1)
        else:
            asked = torch.arange(row.numel())
        if asked.numel() and not rule.compares_all:
            holds[asked], prob[asked] = ahead.candidates(
                active[row[asked]], order[active[row[asked]], col[asked]], pos, width
            )
        elif asked.numel():
            holds[asked], prob[asked] = judge(
                active[row[asked]], order[active[row[asked]], col[asked]], pos
            )
        pick = _pick(row, holds, prob, rule, len(active))
        chosen_col = col[pick]
        chosen_row = row[pick]
        if rule.looks_further:
            chosen_col, held[active] = _look_further(
                judge,
                rule,
                order,
                placed,
                active,
                (row, col, holds, prob),
                is_cand,
                held[active],
                pos,
                chosen_col,
                holds[pick],
            )
        else:
            held[active] = holds[pick]
        ranking[active[chosen_row], pos] = order[active[chosen_row], chosen_col]
        placed[active[chosen_row], chosen_col] = True
        ahead.decided(active[chosen_row], pos)
        if backward and pos + 1 in backward:  # a budget K: where its top-K fails, look back
            failing = active[~held[active] & (counts[active] > pos + 1)]
            if failing.numel():
                held[failing] = _eliminate(
                    judge, order, ranking, placed, failing, counts, backward[pos + 1], pos + 1
                )
                ahead.forget(failing)
        pos += 1
    # the positions after the checked ones: Gem's order of what is left
    for i in range(n):
        done = min(int(counts[i]), stop, cols)
        if done <= start:
            continue
        rest = order[i, : int(counts[i])][~placed[i, : int(counts[i])]]
        ranking[i, done : done + rest.numel()] = rest
    return ranking


def _look_further(
    judge,
    rule: CheckRule,
    order: Tensor,
    placed: Tensor,
    active: Tensor,
    candidates: tuple[Tensor, Tensor, Tensor, Tensor],
    is_cand: Tensor,
    held: Tensor,
    pos: int,
    chosen_col: Tensor,
    chosen_holds: Tensor,
) -> tuple[Tensor, Tensor]:
    """``search``, ``sustain`` and ``climb`` past the ``width`` candidates: for the active rows
    where the prediction holds on none of them (Gem's next pair failed, so all were asked) --
    with ``sustain``, only those whose explanation so far holds (``held``) -- every other pair
    not placed yet is asked too and ``best`` ranks all of them; ``search`` takes its pick only
    where the prediction holds on it, ``sustain`` and ``climb`` always. Returns the chosen
    columns and whether the prediction holds with each."""
    row, col, holds, prob = candidates
    n_rows = int(active.numel())
    any_holds = torch.zeros(n_rows, dtype=torch.bool)
    any_holds.scatter_reduce_(0, row, holds, reduce="amax", include_self=True)
    stuck = ~any_holds & held if rule.only_once_held else ~any_holds
    stuck = torch.nonzero(stuck).view(-1)
    if stuck.numel() == 0:
        return chosen_col, chosen_holds
    rest = ~placed[active[stuck]] & (order[active[stuck]] >= 0)
    rest[:, : is_cand.size(1)] &= ~is_cand[stuck]
    extra_row, extra_col = torch.nonzero(rest, as_tuple=True)
    if extra_row.numel() == 0:
        return chosen_col, chosen_holds
    extra_row = stuck[extra_row]
    extra_holds, extra_prob = judge(active[extra_row], order[active[extra_row], extra_col], pos)
    mine = torch.isin(row, stuck)
    all_row = torch.cat([row[mine], extra_row])
    all_col = torch.cat([col[mine], extra_col])
    key = all_row * order.size(1) + all_col  # row-major, Gem's order within a row
    at = torch.argsort(key)
    all_row, all_col = all_row[at], all_col[at]
    all_holds = torch.cat([holds[mine], extra_holds])[at]
    all_prob = torch.cat([prob[mine], extra_prob])[at]
    best = _pick(all_row, all_holds, all_prob, BEST, n_rows)
    out_col, out_holds = chosen_col.clone(), chosen_holds.clone()
    take = stuck if rule.places_failing else stuck[all_holds[best[stuck]]]
    out_col[take] = all_col[best[take]]
    out_holds[take] = all_holds[best[take]]
    return out_col, out_holds


#: the share of the pairs above the budget dropped in one step of the backward search (those
#: whose removal alone leaves the prediction surest; at least one). A tenth: on NCI1's validation
#: molecules as sufficient as one pair a step, at less than half the cost (molecules of 100
#: bonds). At most 0.5, so that the last step drops one pair and knows whether the rest holds.
DROP_SHARE = 0.1


def _eliminate(
    judge,
    order: Tensor,
    ranking: Tensor,
    placed: Tensor,
    rows: Tensor,
    counts: Tensor,
    previous: int,
    k: int,
) -> Tensor:
    """The backward search of budget ``k`` for the instances ``rows``: from each whole instance,
    with its pairs ranked before ``previous`` kept, drop the pair whose removal leaves the
    prediction surest (holding first, then the highest probability; ties: the pair Gem ranks
    lowest goes) -- :data:`DROP_SHARE` of those above ``k`` at a time, at least one -- all rows
    in one batched forward per protocol and step, until ``k`` pairs are left. Where the
    prediction holds on them, they replace positions ``previous`` to ``k`` of ``ranking`` (in
    place, as ``placed``). Returns, per row, whether the top-``k`` holds now."""
    inverse = torch.full_like(order, -1)  # local pair id -> its column of ``order``
    keep: list[Tensor] = []  # per row: the pool's columns still kept
    for row in rows.tolist():
        c = int(counts[row])
        inverse[row, order[row, :c]] = torch.arange(c)
        fixed = inverse[row, ranking[row, :previous]]
        pool = torch.ones(c, dtype=torch.bool)
        pool[fixed] = False
        keep.append(torch.nonzero(pool).view(-1))  # Gem's order
    need = k - previous
    last_holds = torch.zeros(len(keep), dtype=torch.bool)
    while True:
        going = [r for r, kept in enumerate(keep) if kept.numel() > need]
        if not going:
            break
        inst, sets, sizes = [], [], []
        for r in going:
            row, kept = int(rows[r]), keep[r]
            m = kept.numel()
            # copy j: the prefix and the pool's kept pairs but its j-th
            without = kept.expand(m, m)[~torch.eye(m, dtype=torch.bool)].view(m, m - 1)
            sets.append(
                torch.cat(
                    [ranking[row, :previous].expand(m, previous), order[row][without]], 1
                ).reshape(-1)
            )
            inst.append(torch.full((m,), row))
            sizes.append(torch.full((m,), previous + m - 1))
        holds, prob = judge.sets(torch.cat(inst), torch.cat(sets), torch.cat(sizes))
        key = (holds.double() * 2.0 + prob).tolist()
        at = 0
        for r in going:
            m = keep[r].numel()
            mine = torch.tensor(key[at : at + m])
            # the best keys first; among equals the pair Gem ranks lowest first
            ranked = torch.sort(mine.flip(0), descending=True, stable=True).indices
            ranked = m - 1 - ranked
            n_drop = max(1, int((m - need) * DROP_SHARE))
            gone = torch.zeros(m, dtype=torch.bool)
            gone[ranked[:n_drop]] = True
            keep[r] = keep[r][~gone]
            last_holds[r] = holds[at + int(ranked[0])] if n_drop == 1 else False
            at += m
    now = torch.zeros(len(keep), dtype=torch.bool)
    for r, kept in enumerate(keep):
        row = int(rows[r])
        if not bool(last_holds[r]):
            continue  # the growth's top-k stays
        now[r] = True
        # the kept pairs in the order the growth placed them, the others after in Gem's order
        grown = inverse[row, ranking[row, previous:k]]
        position = torch.full((int(counts[row]),), k, dtype=torch.long)
        position[grown] = torch.arange(k - previous)
        kept = kept[torch.argsort(position[kept] * order.size(1) + kept)]
        placed[row, grown] = False
        placed[row, kept] = True
        ranking[row, previous:k] = order[row, kept]
    return now


class _Lookahead:
    """The target's verdict on Gem's own next pairs, asked ahead in one batched forward.

    Position by position the check first asks whether the explanation so far plus Gem's next
    pair holds. While the check keeps placing Gem's next pair (it holds, or no candidate does),
    the explanation at every later position is known in advance: the pairs placed so far plus
    Gem's order of the rest. So the target is asked about all of them at once, one copy per
    position up to ``stop``, and the positions read the answers; an instance whose check places
    another pair (or whose top-K the backward search replaces) is asked ahead again from there.
    The answers are the ones the position-by-position questions get (the same copies); what
    changes is the number of forwards: a molecule explained alone costs a few batched forwards
    per protocol instead of one per position. Small instances also have the other candidates
    of the asked position asked in the same forward (where Gem's next pair fails, they are the
    next question), and where no candidate held at a failing position, the candidates of the
    later positions where Gem's next pair fails are asked together (:meth:`candidates`); with
    ``repair``, a run of positions where Gem's next pair holds or no candidate does is placed
    at once (:meth:`passing_run`). How far ahead is bounded by
    :data:`~gem_core.models.predict.NODES_PER_FORWARD` nodes per forward, so a large batch,
    whose forwards are full already, is asked one position at a time as before.
    """

    #: the node budget of the copies asked ahead in one forward (1: one position at a time)
    nodes_per_forward = NODES_PER_FORWARD

    def __init__(
        self,
        judge: "_Judge",
        order: Tensor,
        ranking: Tensor,
        placed: Tensor,
        counts: Tensor,
        stop: int,
        width: int = 1,
    ):
        self.judge, self.order, self.ranking, self.placed = judge, order, ranking, placed
        self.counts, self.stop, self.width = counts, int(stop), int(width)
        n, width = order.size(0), max(min(int(stop), order.size(1)), 1)
        self.base = torch.zeros(n, dtype=torch.long)  # the position asked ahead from
        self.length = torch.zeros(n, dtype=torch.long)  # how many positions were asked
        self.pairs = torch.full((n, width), -1, dtype=torch.long)  # Gem's next pairs then
        self.holds = torch.zeros(n, width, dtype=torch.bool)
        self.prob = torch.zeros(n, width, dtype=torch.float64)
        self.valid = torch.zeros(n, dtype=torch.bool)  # the check has followed Gem's order
        #: the other candidates' answers asked ahead, per instance: position -> pair -> answer
        self.spec: dict[int, dict[int, dict[int, tuple[bool, float]]]] = {}
        #: per instance: no candidate held at its last failing position (then the candidates
        #: of later positions are asked ahead: another candidate is likely not to hold either)
        self.none_held: dict[int, bool] = {}

    def next_pair(self, inst: Tensor, cand: Tensor, pos: int) -> tuple[Tensor, Tensor]:
        """What :class:`_Judge` answers for the explanation so far plus ``cand`` (each
        instance's next pair in Gem's order), asked ahead where not known yet."""
        off = pos - self.base[inst]
        known = self.valid[inst] & (off >= 0) & (off < self.length[inst])
        known[known.clone()] &= self.pairs[inst[known], off[known]] == cand[known]
        if not bool(known.all()):
            self._ask(inst[~known], pos)
            off = pos - self.base[inst]
        return self.holds[inst, off], self.prob[inst, off]

    def holding_run(self, inst: Tensor, pos: int) -> int:
        """How many positions from ``pos`` on are known to hold with Gem's next pair for every
        instance of ``inst`` (0 where one is not known or does not hold)."""
        off = pos - self.base[inst]
        length = self.length[inst]
        if not bool((self.valid[inst] & (off >= 0) & (off < length)).all()):
            return 0
        at = torch.arange(self.holds.size(1))[None, :]
        fails = ~self.holds[inst] & (at >= off[:, None]) & (at < length[:, None])
        first_fail = torch.where(fails.any(1), fails.long().argmax(1), length)
        return int((first_fail - off).min())

    def passing_run(self, inst: Tensor, pos: int) -> tuple[int, Optional[Tensor]]:
        """For ``repair``: how many positions from ``pos`` on the check is known to place
        Gem's next pair for every instance of ``inst`` -- it holds, or it fails and the
        answers asked ahead say that no other candidate holds either -- and, per instance,
        whether the prediction holds at the last of them ((0, None) where none is known)."""
        if not self.spec:  # nothing asked ahead about other candidates (a large batch)
            return self.holding_run(inst, pos), None
        off = pos - self.base[inst]
        length = self.length[inst]
        if not bool((self.valid[inst] & (off >= 0) & (off < length)).all()):
            return 0, None
        run = None
        for r, i in enumerate(inst.tolist()):
            o, end = int(off[r]), int(length[r])
            held = self.holds[i, o:end].tolist()
            spec = self.spec.get(i, {})
            n = 0
            while n < len(held):
                if not held[n]:
                    answers = spec.get(pos + n)
                    if not answers or any(h for h, _ in answers.values()):
                        break
                n += 1
            run = n if run is None else min(run, n)
            if run == 0:
                return 0, None
        assert run is not None
        return run, self.held_at(inst, pos + run - 1)

    def held_at(self, inst: Tensor, pos: int) -> Tensor:
        """Whether the prediction holds with Gem's next pair at ``pos`` (asked ahead)."""
        return self.holds[inst, pos - self.base[inst]]

    def decided(self, inst: Tensor, pos: int) -> None:
        """After position ``pos`` is decided: instances that placed another pair than the one
        asked ahead must be asked again."""
        off = pos - self.base[inst]
        inside = self.valid[inst] & (off < self.length[inst])
        same = torch.zeros_like(inside)
        same[inside] = self.ranking[inst[inside], pos] == self.pairs[inst[inside], off[inside]]
        self.valid[inst] = same
        if self.spec:
            self._drop_spec(inst[~same])

    def forget(self, inst: Tensor) -> None:
        """The ranking of ``inst`` changed behind the check's back (the backward search)."""
        self.valid[inst] = False
        self._drop_spec(inst)

    def _drop_spec(self, inst: Tensor) -> None:
        for i in inst.tolist():
            self.spec.pop(i, None)

    def candidates(self, inst: Tensor, cand: Tensor, pos: int, width: int) -> tuple[Tensor, Tensor]:
        """What :class:`_Judge` answers for the explanation so far plus ``cand``: the other
        candidates of the instances whose Gem's next pair fails at ``pos``.

        Where the answers asked ahead say that Gem's next pair fails at later positions too,
        the candidates of those positions (were the check to keep Gem's order until then) are
        asked in the same forward: a run of positions where the prediction holds on no pair
        costs one forward, not one per position. An instance whose check places another pair
        drops them (:meth:`decided`). Bounded by :attr:`nodes_per_forward` as the lookahead."""
        rows = torch.unique(inst)
        nodes = int(self.judge.packed.node_counts()[rows].sum())
        reach = self.nodes_per_forward // max(nodes * max(width - 1, 1), 1)
        if reach <= 1:  # a batch whose forwards are full already: this position only
            return self.judge(inst, cand, pos)
        inst_list, cand_list = inst.tolist(), cand.tolist()
        missing = sorted({i for i in inst_list if pos not in self.spec.get(i, {})})
        if missing:
            self._ask_candidates(missing, pos, width, reach)
        answers = [self.spec[i][pos].get(c) for i, c in zip(inst_list, cand_list)]
        lost = [j for j, a in enumerate(answers) if a is None]
        if lost:  # not a candidate this position was asked about (not expected): ask now
            at = torch.tensor(lost)
            h, p = self.judge(inst[at], cand[at], pos)
            for j, hh, pp in zip(lost, h.tolist(), p.tolist()):
                answers[j] = (hh, pp)
        holds = torch.tensor([bool(a[0]) for a in answers], dtype=torch.bool)  # type: ignore[index]
        prob = torch.tensor([float(a[1]) for a in answers], dtype=torch.float64)  # type: ignore[index]
        held = set(inst[holds].tolist())
        for i in set(inst_list):
            self.none_held[i] = i not in held
        return holds, prob

    def _ask_candidates(self, rows: list[int], pos: int, width: int, reach: int) -> None:
        """One batched question for ``rows`` at ``pos`` and, where Gem's order is known to be
        followed, at up to ``reach`` later positions where Gem's next pair fails: the
        explanation then (the pairs placed so far plus Gem's order of the rest up to that
        position) plus each candidate other than Gem's next pair."""
        copies = _Copies()
        for i in rows:
            offsets = [0]
            off, length = pos - int(self.base[i]), int(self.length[i])
            if self.none_held.get(i, False) and bool(self.valid[i]) and 0 <= off < length:
                fails = (~self.holds[i, off + 1 : length]).nonzero().view(-1) + 1
                offsets += fails[: reach - 1].tolist()
            self._candidate_copies(copies, i, pos, offsets, width)
        if copies.keys:
            holds, prob = self.judge.sets(*copies.tensors())
            self._keep_spec(rows, copies.keys, holds, prob)

    def _candidate_copies(
        self, copies: "_Copies", i: int, pos: int, offsets: list[int], width: int
    ) -> None:
        """Instance ``i``'s copies at positions ``pos + d`` (``d`` in ``offsets``, the check
        following Gem's order until then): the explanation then plus each candidate other than
        Gem's next pair."""
        free = torch.nonzero(~self.placed[i] & (self.order[i] >= 0)).view(-1)
        gem = self.order[i, free]  # Gem's order of the pairs not placed yet
        prefix = self.ranking[i, :pos]
        for d in offsets:
            others = gem[d + 1 : d + width]
            if others.numel() == 0:
                continue
            head = torch.cat([prefix, gem[:d]])
            m = int(others.numel())
            copies.sets.append(torch.cat([head.expand(m, -1), others[:, None]], 1).reshape(-1))
            copies.inst.append(torch.full((m,), i))
            copies.sizes.append(torch.full((m,), pos + d + 1))
            copies.keys += [(i, pos + d, int(c)) for c in others.tolist()]

    def _keep_spec(self, rows: list[int], keys: list, holds: Tensor, prob: Tensor) -> None:
        for i in rows:
            self.spec[i] = {}
        for (i, at, c), h, p in zip(keys, holds.tolist(), prob.tolist()):
            self.spec[i].setdefault(at, {})[c] = (h, p)

    def _ask(self, rows: Tensor, pos: int) -> None:
        """One batched question per protocol: for every row and every position from ``pos`` to
        ``stop``, the pairs placed so far plus Gem's order of the rest up to that position."""
        # how far ahead: as many positions as keep one forward within NODES_PER_FORWARD nodes
        # (a batch of hundreds of molecules is asked one position at a time, as without the
        # lookahead: where the check leaves Gem's order the positions asked ahead are wasted)
        nodes = int(self.judge.packed.node_counts()[rows].sum())
        ahead = max(self.nodes_per_forward // max(nodes, 1), 1)
        span = (
            torch.clamp(torch.minimum(self.counts[rows], torch.tensor(self.stop)), max=pos + ahead)
            - pos
        ).clamp(min=1)  # positions asked per row
        width = int(span.max())
        # Gem's order of each row's pairs not placed yet, the first `span` of them
        free = ~self.placed[rows] & (self.order[rows] >= 0)
        rank = torch.cumsum(free.long(), 1)
        take = free & (rank <= span[:, None])
        r, c = torch.nonzero(take, as_tuple=True)
        nxt = torch.full((rows.numel(), width), -1, dtype=torch.long)
        nxt[r, rank[r, c] - 1] = self.order[rows[r], c]
        # copy (row, j): the placed pairs plus the first j + 1 of those
        line = torch.cat([self.ranking[rows, :pos], nxt], 1)  # [R, pos + width]
        asked = torch.arange(width)[None, :] < span[:, None]  # [R, width]
        keep = (
            torch.arange(pos + width)[None, None, :] <= pos + torch.arange(width)[None, :, None]
        ) & asked[:, :, None]
        sets = line[:, None, :].expand(-1, width, -1)[keep]
        ar, aj = torch.nonzero(asked, as_tuple=True)
        # small instances: the other candidates of this position in the same forward (where
        # Gem's next pair fails, the check asks them next; a failure often follows a failure)
        copies = _Copies()
        if self.width > 1 and ahead >= 2 * self.width:
            for i in rows.tolist():
                self._candidate_copies(copies, i, pos, [0], self.width)
        n_ahead = int(ar.numel())
        inst, local, sizes = rows[ar], sets, pos + 1 + aj
        if copies.keys:
            more = copies.tensors()
            inst, local, sizes = (torch.cat([a, b]) for a, b in zip((inst, local, sizes), more))
        holds, prob = self.judge.sets(inst, local, sizes)
        self.holds[rows[ar], aj], self.prob[rows[ar], aj] = holds[:n_ahead], prob[:n_ahead]
        self.pairs[rows, :width] = nxt
        self.base[rows], self.length[rows] = pos, span
        self.valid[rows] = True
        if self.spec:
            self._drop_spec(rows)
        if copies.keys:
            self._keep_spec(rows.tolist(), copies.keys, holds[n_ahead:], prob[n_ahead:])


class _Copies:
    """Copies to ask the target about, gathered instance by instance: instance, kept local
    pair ids (concatenated), how many each keeps, and a key per copy."""

    def __init__(self) -> None:
        self.inst: list[Tensor] = []
        self.sets: list[Tensor] = []
        self.sizes: list[Tensor] = []
        self.keys: list[tuple[int, int, int]] = []

    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        return torch.cat(self.inst), torch.cat(self.sets), torch.cat(self.sizes)


class _Judge:
    """Asks the target about copies of instances: the pairs placed so far plus one candidate."""

    def __init__(
        self,
        black_box,
        packed: PackedGraphs,
        ranking: Tensor,
        predicted: Tensor,
        protocols: tuple[str, ...],
    ):
        self.black_box, self.packed, self.ranking = black_box, packed, ranking
        self.predicted, self.protocols = predicted, protocols
        self.pair_ptr = packed.pair_ptr[:-1]
        #: a regressor's tolerance (its values are judged, not classes); None for a classifier
        self.tolerance: Optional[float] = None
        if predicted.is_floating_point():
            tol = getattr(black_box, "tolerance", None)
            if tol is None or not float(tol) > 0:
                raise ValueError(
                    "checking a regressor's explanation needs its black box's tolerance (a "
                    "positive value within which a prediction holds)"
                )
            self.tolerance = float(tol)

    def __call__(self, inst: Tensor, cand: Tensor, pos: int) -> tuple[Tensor, Tensor]:
        """Per copy (instance ``inst[c]``, its ``pos`` placed pairs and local pair
        ``cand[c]``): whether the prediction holds under every protocol, and the lowest
        probability of the predicted class among them."""
        local = torch.cat([self.ranking[inst, :pos], cand[:, None]], 1)
        return self.sets(inst, local.reshape(-1), torch.full((int(inst.numel()),), pos + 1))

    def sets(self, inst: Tensor, local: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`__call__` for copies keeping any pairs: copy ``c`` keeps the next ``sizes[c]``
        local pair ids of ``local`` (concatenated in copy order)."""
        n_copies = int(inst.numel())
        sizes = sizes.long()
        pair_index = local.long() + torch.repeat_interleave(self.pair_ptr[inst], sizes)
        ends = torch.cumsum(sizes, 0).tolist()
        cls = self.predicted[inst]
        drops = [Protocol(protocol) is Protocol.DROP_ISOLATED for protocol in self.protocols]
        # the same runs of copies under every protocol, in one forward of the target
        probs: list[list[Tensor]] = [[] for _ in drops]
        with torch.no_grad():
            for part in self._parts(inst, len(drops)):
                begin = ends[part.start - 1] if part.start else 0
                pairs, copies = pair_index[begin : ends[part.stop - 1]], sizes[part]
                p = self._proba(inst[part], pairs, copies, drops)
                for j, block in enumerate(p.split(part.stop - part.start)):
                    probs[j].append(block)
        prob = torch.full((n_copies,), float("inf"), dtype=torch.float64)
        holds = torch.ones(n_copies, dtype=torch.bool)
        tol = self.tolerance
        for per_protocol in probs:
            p = torch.cat(per_protocol)
            if tol is not None:  # a regressor: the value within the tolerance, and how close
                gap = (p[:, 0] - cls).abs()
                prob = torch.minimum(prob, 1.0 - (gap / (10.0 * tol)).clamp(max=1.0))
                holds &= gap <= tol
                continue
            prob = torch.minimum(prob, p[torch.arange(n_copies), cls])
            holds &= p.argmax(-1) == cls
        return holds, prob

    def _parts(self, inst: Tensor, protocols: int) -> list[slice]:
        """Runs of copies whose forward (every protocol's copies together) has at most
        :data:`~gem_core.models.predict.NODES_PER_FORWARD` nodes on the CPU, where forwards
        that fit the caches are faster (one run on a GPU)."""
        return forward_slices(
            self.black_box,
            self.packed.node_counts()[inst].tolist(),
            max(NODES_PER_FORWARD // max(protocols, 1), 1),
        )

    def _proba(
        self, inst: Tensor, pair_index: Tensor, per_copy: Tensor, drops: list[bool]
    ) -> Tensor:
        """Probabilities of the copies under each protocol (``drops``: ``drop_isolated`` or
        not), stacked protocol after protocol, from one forward of the target."""
        pair_copy = torch.arange(int(inst.numel())).repeat_interleave(per_copy)
        batch = InstanceBatch.concat(
            [
                self.packed.copies_batch(inst, pair_index, pair_copy, drop_isolated=drop)
                for drop in drops
            ]
        )
        out = self.black_box(batch).detach().to("cpu", torch.float64)
        return out if self.tolerance is not None else torch.softmax(out, -1)


def _pick(row: Tensor, holds: Tensor, prob: Tensor, rule: CheckRule, n_rows: int) -> Tensor:
    """Per row, the index (into the flat candidates) of the candidate the rule places
    (candidates not asked about have ``prob`` -1 and do not hold)."""
    first = torch.full((n_rows,), -1, dtype=torch.long)
    idx = torch.arange(row.numel())
    # the first candidate of each row: the smallest flat index (candidates are row-major)
    first.scatter_reduce_(0, row, idx, reduce="amin", include_self=False)
    # the best: holds first, then the highest probability, ties to Gem's order (lower index)
    key = holds.double() * 2.0 + prob  # prob in [0, 1]
    best_key = torch.full((n_rows,), -2.0, dtype=torch.float64)
    best_key.scatter_reduce_(0, row, key, reduce="amax", include_self=True)
    is_best = key == best_key[row]
    best = torch.full((n_rows,), row.numel(), dtype=torch.long)
    best.scatter_reduce_(0, row[is_best], idx[is_best], reduce="amin", include_self=True)
    if rule.compares_all:
        return best
    # repair (search and sustain before they look further): Gem's next pair unless it fails
    # while another candidate holds
    first_holds = holds[first]
    any_holds = torch.zeros(n_rows, dtype=torch.bool)
    any_holds.scatter_reduce_(0, row, holds, reduce="amax", include_self=True)
    return torch.where(first_holds | ~any_holds, first, best)


def reassign_scores(
    packed: PackedGraphs, scores: Tensor, ranking: Tensor, counts: Tensor
) -> Tensor:
    """Gem's score values given out along ``ranking``. Equal values stay equal where the
    ranking keeps such pairs in index order (the order :func:`~gem_core.data.ranking.topk_mask`
    gives ties), so ties Gem made, of symmetric bonds say, remain ties; elsewhere a value moves
    one float step below its predecessor so that every top-k reads the checked order."""
    out = scores.clone()
    ptr = packed.pair_ptr[:-1]
    for i in range(packed.num_instances):
        c = int(counts[i])
        if c == 0:
            continue
        gem = torch.sort(scores[int(ptr[i]) : int(ptr[i]) + c], descending=True).values
        order = ranking[i, :c]
        out[int(ptr[i]) + order] = values_along(gem, order)
    return out


def values_along(gem: Tensor, order: Tensor) -> Tensor:
    """One instance's sorted score values (``gem``, best first) for the pairs of ``order``
    (local pair ids, in the new order): a tie in index order stays a tie, elsewhere a value
    moves one float step below its predecessor (:func:`reassign_scores`'s rule)."""
    return values_along_rows(gem[None], order[None])[0]


_INT32_MIN = -(2**31)


def _ordered_ints(values: Tensor) -> Tensor:
    """float32 ``values`` as int64 keys in the same order, one apart per float step."""
    bits = values.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    return torch.where(bits >= 0, bits, _INT32_MIN - bits)


def _floats_of(keys: Tensor) -> Tensor:
    bits = torch.where(keys >= 0, keys, _INT32_MIN - keys).to(torch.int32)
    return bits.view(torch.float32)


def values_along_rows(gem: Tensor, order: Tensor) -> Tensor:
    """:func:`values_along` of many instances at once: row ``i`` of ``gem`` ``[n, w]`` holds an
    instance's sorted values, row ``i`` of ``order`` its pairs in the new order (trailing
    padding, if any, is left to the caller). The rule, ``v[r] = v[r-1]`` for a tie in index order
    and ``v[r] = min(g[r], v[r-1] - one step)`` elsewhere, is a running minimum in float steps:
    with ``S`` the steps taken so far, ``v = cummin(g + S) - S``; no loop over positions."""
    gem = torch.as_tensor(gem, dtype=torch.float32)
    if gem.numel() == 0 or gem.shape[1] < 2:
        return gem.clone()
    if not bool(torch.isfinite(gem).all()):
        return _values_along_loop(gem, order)
    keys = _ordered_ints(gem)
    tie_in_order = (gem[:, 1:] == gem[:, :-1]) & (order[:, 1:] > order[:, :-1])
    steps = torch.zeros_like(keys)
    steps[:, 1:] = (~tie_in_order).to(torch.int64)
    taken = torch.cumsum(steps, dim=1)
    return _floats_of(torch.cummin(keys + taken, dim=1).values - taken)


def _values_along_loop(gem: Tensor, order: Tensor) -> Tensor:
    """The same rule position by position (for rows holding an infinite value)."""
    values = gem.clone()
    down = torch.tensor(float("-inf"))
    for row in range(gem.shape[0]):
        for r in range(1, gem.shape[1]):
            if gem[row, r] == gem[row, r - 1] and int(order[row, r]) > int(order[row, r - 1]):
                values[row, r] = values[row, r - 1]  # a tie in index order: it stays a tie
            elif values[row, r] >= values[row, r - 1]:
                values[row, r] = torch.nextafter(values[row, r - 1], down)
    return values


def deletion_lead(
    black_box,
    packed: PackedGraphs,
    scores: Tensor,
    predicted: Tensor,
    *,
    lead: int,
    within: int,
    device=None,
) -> Tensor:
    """Gem's flat pair ``scores`` with the first ``lead`` pairs of each instance's top-``within``
    (its smallest explanation) in the target's greedy deletion order
    (:func:`~gem_core.gem.necessity_order.necessity_order_packed`: step by step, the pair whose
    deletion with those before it most lowers the predicted class, both protocols). The other
    pairs of the top-``within`` follow in their order, every later pair keeps its place: the
    top-``within`` set and every larger top-K stay as they are. The values stay Gem's,
    reassigned along the new order (ties in index order stay ties)."""
    scores = torch.as_tensor(scores, dtype=torch.float32).reshape(-1).cpu()
    if scores.numel() != packed.num_pairs:
        raise ValueError(f"{scores.numel()} scores for {packed.num_pairs} pairs")
    if lead <= 0 or packed.num_pairs == 0:
        return scores
    if torch.as_tensor(predicted).is_floating_point():
        raise ValueError(
            "check.lead orders pairs by how much their deletion lowers the predicted class: it "
            "applies to classifiers; set it to 0 for a regression model"
        )
    parts = packed.split_pairs(scores)
    ranked = [pair_order(part) for part in parts]  # topk_mask's order
    candidates = []
    for part, order in zip(parts, ranked):
        mask = torch.zeros(part.numel(), dtype=torch.bool)
        mask[order[:within]] = True
        candidates.append(mask)
    device = torch.device("cpu") if device is None else torch.device(device)
    leads = necessity_order_packed(
        packed, candidates, torch.as_tensor(predicted), black_box, int(lead), device=device
    )
    counts = packed.pair_counts()
    ranking = torch.full((packed.num_instances, max(int(counts.max()), 1)), -1, dtype=torch.long)
    for i, (order, first) in enumerate(zip(ranked, leads)):
        chosen = set(first)
        ranking[i, : len(order)] = torch.tensor(
            list(first) + [j for j in order if j not in chosen], dtype=torch.long
        )
    return reassign_scores(packed, scores, ranking, counts)


__all__ = [
    "checked_scores",
    "deletion_lead",
    "reassign_scores",
    "values_along",
    "values_along_rows",
]
