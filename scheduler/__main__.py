"""`python -m scheduler --config PATH|JSON [--FIELD VALUE ...]`: run one scheduler until SIGTERM.

The configuration is a `SchedulerConfig` (scheduler/config.py), read from a JSON file or
inline JSON; every field is also a flag (`--kvs-address`, `--port`, ...) that overrides it
(`runtime.config`). A bad field ends with a one-line error naming it (status 2).

Prints one `READY {"address": ...}` line on stdout once bound. With `--ready-file`, writes
the same JSON, plus `"workers"` (how many live executor workers it knew then), to that file
once its warm-up is over: it has heard an executor worker, or waited `warmup` for one (a
readiness probe for Kubernetes).
"""
from __future__ import annotations

import os
import signal
import sys

from runtime.auth import KeyFileError
from runtime.config import parse_config, role_parser
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready, write_ready_file

from .config import SchedulerConfig
from .server import Scheduler


def main() -> None:
    parser = role_parser(SchedulerConfig, "python -m scheduler", __doc__)
    parser.add_argument("--ready-file", help="write the readiness JSON here once the "
                        "scheduler has heard an executor worker or waited `warmup` for one "
                        "(a probe for Kubernetes)")
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
    info = {"address": scheduler.address, "pid": os.getpid()}
    if args.ready_file:
        scheduler.on_warm = lambda workers: write_ready_file(dict(info, workers=workers),
                                                             args.ready_file)
    announce_ready(info)
    log.info("scheduler listening on %s", scheduler.address)
    scheduler.serve()
    log.info("scheduler stopped")


if __name__ == "__main__":
    main()
