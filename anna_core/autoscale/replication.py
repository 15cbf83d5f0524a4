"""Hot-key replication and de-replication (Algorithm 2, dissertation 3.3.2), pure.

Contract:
- `hot_threshold(summary, config)`: H = mean + s x std of the per-key access counts, and at
  least `hot_key_min_accesses`; a key is hot when its accesses exceed H.
- `cold_threshold(summary, config)`: L = `cold_key_mean_fraction` x mean; a key is cold below L.
  H >= L always, so a key between them keeps its replication (hysteresis).
- `replicate(key, r, latency, config, memory_nodes, threads)`: the hot key's next vector, or
  None when it cannot grow. Across nodes first: R_M' = min(max(R_M + 1, ceil(R_M x ratio)),
  N_M, max_memory_replication); once on every memory node (or at the cap), across threads:
  T_M' = min(max(T_M + 1, ceil(T_M x ratio)), threads per memory node). `ratio` is the key's
  own client latency (else the tier's) over the SLO, capped at c. Keys without a memory
  replica are promoted first (Algorithm 1), never replicated here.
- `dereplicate(key, r, config)`: a cold key with R_M > 1 or T_M > 1 returns to the base vector
  (one memory replica, k disk replicas, one thread each; Algorithm 2 line 10); else None.
Both return (vector, reason).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Tuple

from ..config import Replication
from .policy_config import PolicyConfig
from .summaries import KeySummary, Summary
from .words import ms

__all__ = ["hot_threshold", "cold_threshold", "replicate", "dereplicate"]


def hot_threshold(summary: Summary, config: PolicyConfig) -> float:
    """H: accesses above which a key is hot."""
    return max(summary.access_mean + config.hot_key_std_devs * summary.access_std,
               float(config.hot_key_min_accesses))


def cold_threshold(summary: Summary, config: PolicyConfig) -> float:
    """L: accesses below which a replicated key is cold."""
    return config.cold_key_mean_fraction * summary.access_mean


def _grow(current: int, ratio: float, cap: int) -> int:
    return min(max(current + 1, int(math.ceil(current * ratio - 1e-9))), cap)


def replicate(key: KeySummary, r: Replication, latency: float, config: PolicyConfig,
              memory_nodes: int, threads: int, hot: float, statistic: str,
              hot_why: str = "") -> Optional[Tuple[Replication, str]]:
    """Algorithm 2 lines 1-8 for one hot key (see the module contract).

    `latency` is the tier's observed latency (the SLO statistic), `hot` the threshold H used
    (`hot_why` how it was computed), `statistic` the latency's name, for the reason."""
    if r.memory_global <= 0:
        return None
    observed = key.latency if key.latency is not None else latency
    which = "its clients' mean latency" if key.latency is not None else f"{statistic} latency"
    raw = observed / config.latency_slo
    ratio = min(raw, config.max_latency_ratio)
    because = (f"{key.accesses} accesses > H = {hot:.1f}{hot_why}; {which} {ms(observed)} / SLO "
               f"{ms(config.latency_slo)} = {raw:.2f}"
               + (f", capped at c = {config.max_latency_ratio:g}" if raw > ratio else ""))
    cap = memory_nodes
    if config.max_memory_replication is not None:
        cap = min(cap, config.max_memory_replication)
    if r.memory_global < cap:
        target = _grow(r.memory_global, ratio, cap)
        return (replace(r, memory_global=target),
                f"replicated hot key {key.key!r} to {target} memory nodes (was "
                f"{r.memory_global}): {because}")
    if r.memory_global >= cap and r.memory_local < threads:
        target = _grow(r.memory_local, ratio, threads)
        return (replace(r, memory_local=target),
                f"replicated hot key {key.key!r} to {target} threads on each of its "
                f"{r.memory_global} memory nodes (was {r.memory_local}): {because}")
    return None


def dereplicate(key: KeySummary, r: Replication, config: PolicyConfig,
                cold: float) -> Optional[Tuple[Replication, str]]:
    """Algorithm 2 lines 9-10 for one key: back to the base vector once cold."""
    if r.memory_global <= 0 or not (r.memory_global > 1 or r.memory_local > 1):
        return None
    if not key.accesses < cold:
        return None
    return (config.base_replication(),
            f"de-replicated cooled key {key.key!r} to 1 memory node x 1 thread (was "
            f"{r.memory_global} x {r.memory_local}): {key.accesses} accesses < L = {cold:.1f}")
