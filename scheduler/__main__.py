"""`python -m scheduler --config JSON`: run one scheduler until SIGTERM.

Prints one `READY {"address": ...}` line on stdout once bound
(and, with `--ready-file`, writes it to that file).
"""
from __future__ import annotations

import argparse
import signal
import sys

from runtime.auth import KeyFileError
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready

from .config import SchedulerConfig
from .server import Scheduler


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scheduler", description=__doc__)
    parser.add_argument("--config", required=True, help="SchedulerConfig as JSON")
    parser.add_argument("--ready-file", help="also write the readiness JSON here (a probe "
                        "for Kubernetes: written once the scheduler is bound)")
    args = parser.parse_args()
    config = SchedulerConfig.from_json(args.config)
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
