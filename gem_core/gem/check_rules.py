"""The check's rules and its backward search, as small strategy objects.

The check (:mod:`gem_core.gem.checked_ranking`) grows Gem's ranking position by position and asks
the target which of Gem's next pairs to place. A rule is not a name the check compares: it is a
:class:`CheckRule` whose attributes say what the check does at a position (compare every
candidate or Gem's next pair first, look past the candidates where none holds, place the surest
pair even where it fails). A :class:`BackwardSearch` says at which budgets of the grid the check
also searches backwards. Settings and the command line name them (``"repair"``, ``"grid"``);
:func:`check_rule` and :func:`backward_search` turn the names into the objects, in this module
only.

This module imports nothing of the engine, so the settings and the check both read it without a
cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional, TypeVar, Union


@dataclass(frozen=True)
class CheckRule:
    """What the check places at a position, given the target's verdict on the candidates.

    Attributes:
        name: how settings and the command line name the rule.
        asks_target: False only for ``off``: Gem's ranking as it is.
        compares_all: every candidate is asked and the surest one placed (``best``); otherwise
            Gem's next pair is asked first and kept unless it fails while another holds.
        looks_further: where none of the ``width`` candidates holds, every pair not placed yet is
            asked too (``search``, ``sustain``, ``climb``).
        only_once_held: it looks further only where the explanation so far held (``sustain``).
        places_failing: what it finds by looking further is placed even where the prediction
            does not hold on it (``sustain``, ``climb``: the explanation climbs toward holding).
        summary: the rule in plain words (the app's How-it-works page), what it does with Gem's
            next edges.
    """

    name: str
    asks_target: bool
    compares_all: bool
    looks_further: bool
    only_once_held: bool
    places_failing: bool
    summary: str

    def __str__(self) -> str:
        return self.name


_KEEP = "keeps Gem's own next edge unless the prediction fails on it and holds with another"

OFF = CheckRule("off", False, False, False, False, False, "leaves Gem's ranking as it is")
REPAIR = CheckRule("repair", True, False, False, False, False, _KEEP)
BEST = CheckRule(
    "best", True, True, False, False, False, "takes the one the prediction holds on most surely"
)
SEARCH = CheckRule(
    "search",
    True,
    False,
    True,
    False,
    False,
    _KEEP + ", and where it holds with none of them, it looks at every edge left for one it "
    "holds with",
)
SUSTAIN = CheckRule(
    "sustain",
    True,
    False,
    True,
    True,
    True,
    _KEEP + ", and where the explanation so far held and none of them keeps it so, it takes the "
    "edge of all those left that comes closest",
)
CLIMB = CheckRule(
    "climb",
    True,
    False,
    True,
    False,
    True,
    _KEEP + ", and where it holds with none of them, it climbs: of every edge left, it takes one "
    "it holds with, or else the one that brings it nearest to holding",
)

#: every rule by name (``off`` first)
CHECK_RULES: Mapping[str, CheckRule] = {
    r.name: r for r in (OFF, REPAIR, BEST, SEARCH, SUSTAIN, CLIMB)
}


_T = TypeVar("_T")


def _named(table: Mapping[str, _T], kind: type[_T], value: Union[_T, str]) -> _T:
    """The entry of ``table`` that ``value`` names (case-insensitive; a ``kind`` is returned as
    it is); a one-line error listing the names for anything else."""
    if isinstance(value, kind):
        return value
    found = table.get(value.strip().lower()) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{value!r} is not one of {', '.join(table)}")
    return found


def check_rule(value: Union[CheckRule, str]) -> CheckRule:
    """The rule ``value`` names (a rule is returned as it is); a one-line error for others."""
    return _named(CHECK_RULES, CheckRule, value)


@dataclass(frozen=True)
class BackwardSearch:
    """Where the check also searches backwards from the whole instance (the grid's budgets).

    Attributes:
        name: how settings name it.
        skip: how many of the grid's smallest budgets it leaves out (None: nowhere).
    """

    name: str
    skip: Optional[int]

    def __str__(self) -> str:
        return self.name

    def spans(self, k_grid: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """The ``(previous K, K)`` spans of ``k_grid`` it searches (the first K's previous is 0,
        the check's start)."""
        if self.skip is None:
            return ()
        ks = sorted({int(k) for k in k_grid})
        return tuple(zip([0] + ks[:-1], ks))[self.skip :]


#: ``off``: nowhere; ``grid``: at every K of the grid; ``late``: at those above the smallest
BACKWARD_SEARCHES: Mapping[str, BackwardSearch] = {
    b.name: b
    for b in (BackwardSearch("off", None), BackwardSearch("grid", 0), BackwardSearch("late", 1))
}


def backward_search(value: Union[BackwardSearch, str]) -> BackwardSearch:
    """The backward search ``value`` names; a one-line error for others."""
    return _named(BACKWARD_SEARCHES, BackwardSearch, value)


__all__ = [
    "BACKWARD_SEARCHES",
    "BackwardSearch",
    "CHECK_RULES",
    "CheckRule",
    "backward_search",
    "check_rule",
]
