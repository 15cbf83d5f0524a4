"""`Reference(key, concurrent=False)`: an argument the executor replaces with the object stored
under `key`.

Contract: a `Reference` given as a top-level argument of a call (or returned by an upstream
function and so passed to a downstream one) is resolved on the executor through its node
cache before the function runs. The scheduler sees the referenced keys of a call and uses
them for data locality (and, for causal calls, as the DAG's read set R~_DAG). A key holding no
object makes the call fail with `ExecutionError`. With `concurrent=True` (causal calls) the
function receives the list of every concurrent value of the key (sorted by their serialized
bytes) instead of the first one; it travels as `Argument.concurrent`.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Reference"]


@dataclass(frozen=True)
class Reference:
    """A pointer to the object stored under `key` in the KVS."""

    key: str
    concurrent: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise TypeError(f"Reference key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.concurrent, bool):
            raise TypeError(f"Reference concurrent must be a bool, got {self.concurrent!r}")
