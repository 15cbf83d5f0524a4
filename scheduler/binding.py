"""Binding a restarted scheduler's request socket on exactly the address it had."""
from __future__ import annotations

import logging
from typing import Optional

import zmq

from runtime.auth import Credentials, format_address, make_server, parse_address

__all__ = ["bind_exactly"]

log = logging.getLogger("cloudburst.scheduler")


def bind_exactly(context: zmq.Context, address: str, max_frame_bytes: int,
                  creds: Optional[Credentials]) -> "tuple[zmq.Socket, str]":
    """The request socket bound on exactly `address` (a restarted scheduler's, with or without
    its key suffix); with `creds` a CURVE server open to clients and functions, whose address carries this
    scheduler's key (the same as before unless the cluster's keys changed)."""
    endpoint, old_key = parse_address(address)
    socket = context.socket(zmq.PULL)
    try:
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, 100000)
        socket.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        if creds is not None:
            make_server(socket, creds, "all")
        socket.bind(endpoint)
    except BaseException:
        socket.close(0)
        raise
    if creds is None:
        return socket, endpoint
    if old_key is not None and old_key != creds.keypair.public:
        log.warning("the cluster's key changed since %s was bound; clients need the new "
                    "address", endpoint)
    return socket, format_address(endpoint, creds.keypair.public)
