"""Vector clocks: the order and merge HydroCache reasons with (dissertation 4.1.2).

Contract: a vector clock (VC) is a ``Mapping[str, int]`` from executor id to logical clock.
Zero entries mean nothing and a missing entry counts as 0, so ``{"e": 0}`` equals ``{}``.
``merge`` returns a plain ``dict`` without zero entries.

- ``compare(a, b)``: ``Order.EQUAL``, ``BEFORE`` (a → b: every entry of a is <= b's and they
  differ), ``AFTER`` (b → a) or ``CONCURRENT``.
- ``merge(a, b)``: entry-wise max (the least upper bound; Definition 1's clock merge).
- ``happens_before(a, b)``: a → b strictly; ``concurrent(a, b)``: neither precedes the other
  and they differ.
- ``supersedes(new, old)``: Definition 4, ``new == old or old → new``.

The comparison, the supersedes check and the merge are the C++ kernel's
(``anna_core._core.compare_clocks``, ``clock_supersedes`` and ``merge_clocks``: the kernel's
clock order and merge, walking the dicts in place); there is one implementation of the
truth, and this module only names it. ``supersedes`` and ``merge`` are the kernel's
functions themselves (no Python frame: a bind calls them tens of times).
"""
from __future__ import annotations

import enum
from typing import Callable, Dict, Mapping

from anna_core import _core

VC = Mapping[str, int]

__all__ = ["Order", "VC", "compare", "merge", "happens_before", "concurrent", "supersedes"]


class Order(enum.IntEnum):
    """How two vector clocks relate (numbering matches ``_core.compare_clocks``)."""
    EQUAL = 0
    BEFORE = 1       # a → b
    AFTER = 2        # b → a
    CONCURRENT = 3


def compare(a: VC, b: VC) -> Order:
    """The order of ``a`` relative to ``b``."""
    return Order(_core.compare_clocks(a, b))


def happens_before(a: VC, b: VC) -> bool:
    """a → b: ``a`` is strictly dominated by ``b``."""
    return _core.compare_clocks(a, b) == 1


def concurrent(a: VC, b: VC) -> bool:
    """Neither a → b nor b → a, and a != b."""
    return _core.compare_clocks(a, b) == 3


# Definition 4 on clocks: ``supersedes(new, old)`` is ``new == old or old → new``.
supersedes: Callable[[VC, VC], bool] = _core.clock_supersedes
# Entry-wise max of ``a`` and ``b`` (a new dict, zero entries dropped).
merge: Callable[[VC, VC], Dict[str, int]] = _core.merge_clocks
