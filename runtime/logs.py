"""Logging set-up for a service process: one stderr handler, one line format, a level.

`configure_logging(level, name, family)` accepts the standard level names (case-insensitive;
None means WARNING) and raises `ValueError` for anything else, so a typo in `--log-level` is
refused rather than silently ignored. It returns the `<family>.<name>` logger.
"""
from __future__ import annotations

import logging
import sys
from typing import Optional

__all__ = ["LEVELS", "configure_logging", "parse_level"]

LEVELS = ("debug", "info", "warning", "error", "critical")


def parse_level(level: Optional[str]) -> int:
    """The numeric level of a level name; ValueError names the accepted ones."""
    name = (level or "warning").lower()
    if name not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    return getattr(logging, name.upper())


def configure_logging(level: Optional[str], name: str, family: str = "cloudburst"
                      ) -> logging.Logger:
    """stderr logging for a service process; returns its logger."""
    logging.basicConfig(level=parse_level(level), stream=sys.stderr,
                        format=f"%(asctime)s {name} %(levelname)s %(message)s")
    return logging.getLogger(f"{family}.{name}")
