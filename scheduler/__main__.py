"""`python -m scheduler --config PATH|JSON [--FIELD VALUE ...]`: run one scheduler until SIGTERM.

The configuration is a `SchedulerConfig` (scheduler/config.py), read from a JSON file or
inline JSON; every field is also a flag (`--kvs-address`, `--port`, ...) that overrides it
(`runtime.config`). A bad field ends with a one-line error naming it (status 2).

Prints one `READY {"address": ...}` line on stdout once bound
(and, with `--ready-file`, writes it to that file).
"""
from __future__ import annotations

import signal
import sys

from runtime.auth import KeyFileError
from runtime.config import parse_config, role_parser
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready

from .config import SchedulerConfig
from .server import Scheduler


def main() -> None:
    parser = role_parser(SchedulerConfig, "python -m scheduler", __doc__)
    parser.add_argument("--ready-file", help="also write the readiness JSON here (a probe "
                        "for Kubernetes: written once the scheduler is bound)")
    config, args = parse_config(parser, SchedulerConfig)
    log = configure_logging(config.log_level, "scheduler")
    raise_descriptor_limit()
    try:
        scheduler = Scheduler(config)
    except KeyFileError as e:          # a missing or malformed key file, named
        log.error("cannot start: %s", e)
        sys.exit(2)
    # SIGTERM: a graceful stop when `stop_grace` is set (calls in flight end, new ones are
    # sent elsewhere); SIGINT: at once
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop(graceful=True))
    signal.signal(signal.SIGINT, lambda *_: scheduler.stop())
    announce_ready({"address": scheduler.address, "pid": __import__("os").getpid()},
                   args.ready_file)
    log.info("scheduler listening on %s", scheduler.address)
    scheduler.serve()
    log.info("scheduler stopped")


if __name__ == "__main__":
    main()
