"""How the policy engine writes numbers in its reasons (pure formatting, nothing else).

Contract: `ms(seconds)` -> "5.1 ms"; `amount(bytes)` -> "1.5 MiB"; `per_window(accesses,
period, config)` -> "3 accesses in 1.5 s (4.0 per 6 s)"; `occ(fraction)` -> "0.82".
"""
from __future__ import annotations

from .policy_config import PolicyConfig

__all__ = ["ms", "amount", "per_window", "occ"]


def ms(seconds: float) -> str:
    """Seconds as milliseconds, one decimal."""
    return f"{seconds * 1000:.1f} ms"


def amount(size: float) -> str:
    """Bytes in binary units."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def per_window(accesses: int, period: float, config: PolicyConfig) -> str:
    """A key's accesses in the period and as a count per promotion window."""
    scaled = accesses / period * config.promote_window
    return (f"{accesses} accesses in {period:g} s ({scaled:.1f} per "
            f"{config.promote_window:g} s)")


def occ(fraction: float) -> str:
    """An occupancy or storage fraction, two decimals."""
    return f"{fraction:.2f}"
