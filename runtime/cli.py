"""What every command-line entry point shares: checked argument types, `--log-level`,
`--version`.

Contract: the types raise `argparse.ArgumentTypeError`, so a bad value (`--nodes 0`,
`--log-level loud`) ends with argparse's one-line usage error, never a traceback.
`add_common(parser)` adds `--log-level` (one of `runtime.logs.LEVELS`) and `--version`.
`knobs_from_json(text, cls, option)` reads a JSON object of a configuration dataclass' fields
(`--policy-config`), raising ValueError naming the option and any unknown field.
Help texts show defaults when the parser uses `HELP_FORMAT`: an option's default is added
once, and not when its help already says it ("(default: ...)"), when it is None (nothing
to show) or for a flag.
`exit_quietly_on_broken_pipe(run)` runs a command's body: when its reader goes away (`cloudburst
status | head`), it exits with 141 (128 + SIGPIPE, what a shell reports for a Unix tool
stopped so) and prints nothing, instead of a BrokenPipeError traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from importlib import metadata
from typing import Any, Callable, Dict

from .logs import LEVELS

__all__ = ["HELP_FORMAT", "exit_quietly_on_broken_pipe", "positive_int", "non_negative_int", "positive_float", "non_negative_float", "log_level",
           "package_version", "add_common"]

DISTRIBUTION = "cloudburst-hydro"


class HELP_FORMAT(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that keeps the description's layout and shows each option's default once (see
    the module contract)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default is None or action.nargs == 0:
            return text          # said already, nothing to say, or a flag (on when given)
        return super()._get_help_string(action)


BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE


def exit_quietly_on_broken_pipe(run: Callable[[], int]) -> int:
    """`run()`'s exit status; 141, silently, when standard output's reader went away."""
    try:
        status = run()
        sys.stdout.flush()       # inside the try: a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        # Python would flush stdout again at exit and print the error: point it at devnull
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_STATUS


def _number(text: str, kind: type, minimum: float, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, 1, "a whole number of at least 1")


def non_negative_int(text: str) -> int:
    return _number(text, int, 0, "a whole number of at least 0")


def positive_float(text: str) -> float:
    value = _number(text, float, 0.0, "a number above 0")
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def knobs_from_json(text: str, cls: type, option: str) -> Dict[str, Any]:
    """The fields of dataclass `cls` that `text` (a JSON object, "" for none) sets; ValueError
    naming `option` when it is not a JSON object or names a field `cls` does not have."""
    if not text.strip():
        return {}
    try:
        knobs = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{option} is not valid JSON: {e}") from None
    if not isinstance(knobs, dict):
        raise ValueError(f"{option} must be a JSON object, got {type(knobs).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(knobs) - known)
    if unknown:
        raise ValueError(f"{option}: unknown {cls.__name__} knob(s) {unknown}; known: "
                         f"{sorted(known)}")
    return knobs


def non_negative_float(text: str) -> float:
    value = _number(text, float, 0.0, "a number of at least 0")
    if value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of at least 0, got {text!r}")
    return value


def log_level(text: str) -> str:
    if text.lower() not in LEVELS:
        raise argparse.ArgumentTypeError(f"unknown log level {text!r}; use one of "
                                         f"{', '.join(LEVELS)}")
    return text.lower()


def package_version() -> str:
    """The installed platform's version ("unknown" when run from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def add_common(parser: argparse.ArgumentParser, log_default: str = "warning") -> None:
    """`--log-level` and `--version` on `parser`."""
    parser.add_argument("--log-level", type=log_level, default=log_default,
                        help=f"log level of the cluster's processes ({', '.join(LEVELS)})")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {package_version()}")
