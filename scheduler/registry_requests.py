"""The scheduler's registry requests: functions and DAGs registered, deleted, listed.

Contract: `RegistryRequests` is mixed into `scheduler.server.Scheduler`; each handler takes
one request's payload and answers its `response_address` with a `reply`:
- `register_fn`: the function is stored under a fresh version (BAD_REQUEST without a name);
- `register_dag`: the DAG is checked (size first, then its functions are registered and it
  is well formed; INVALID_DAG naming why) and stored under a fresh version;
- `delete_dag` / `delete_fn`: DAG_NOT_FOUND / FUNCTION_NOT_FOUND when there is none;
- `list`: the registered names; `info`: the live workers, and the nodes whose caches hold
  the key named (if any).
A registration or deletion also revokes this scheduler's worker leases that run the name
(`LeaseBook.registered_again`), so direct calls made after it run what it registered (but
one that reaches its worker before the revocation, over another connection).
`_on_registry_update` applies an update Anna pushed for a registry key (a bad one is
logged and ignored). `dag_from_record` is a registry record's `scheduler.dag.Dag`.
Uses the scheduler's `config`, `registry`, `table`, `worker_leases`, `_revoke` and `_push`.
"""
from __future__ import annotations

import logging
import uuid

from anna_core.wire import tuple_to_lattice
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from faas.errors import InvalidDag

from .dag import Dag, check_size, validate

__all__ = ["RegistryRequests", "dag_from_record"]

log = logging.getLogger("cloudburst.scheduler")


def dag_from_record(record: pb.DagRecord) -> Dag:
    return Dag.create(record.name, list(record.functions),
                      [(c.source, c.target) for c in record.connections])


class RegistryRequests:
    """The registry's request handlers; mixed into the scheduler (module contract)."""

    def _reply(self, address: str, reply: pb.Reply) -> None:
        self._push.send(address, "reply", reply)

    def _register_fn(self, payload: bytes) -> None:
        req = pb.RegisterFunction.FromString(payload)
        record = req.function
        if not record.name:
            return self._reply(req.response_address, pb.Reply(
                request_id=req.request_id, status=pb.BAD_REQUEST,
                message="a function needs a non-empty name"))
        record.version = uuid.uuid4().hex
        self.registry.put_function(record)
        log.info("registered function %s (version %s)", record.name, record.version)
        self._revoke(self.worker_leases.registered_again(record.name, dag=False))
        self._reply(req.response_address, pb.Reply(request_id=req.request_id, status=pb.OK))

    def _register_dag(self, payload: bytes) -> None:
        req = pb.RegisterDag.FromString(payload)
        try:
            dag = dag_from_record(req.dag)
            check_size(dag, self.config.max_dag_functions)   # before any registry lookup
            known = {f for f in dag.functions if self.registry.function(f) is not None}
            validate(dag, known, self.config.max_dag_functions)
        except InvalidDag as e:
            return self._reply(req.response_address, pb.Reply(
                request_id=req.request_id, status=pb.INVALID_DAG, message=str(e)))
        req.dag.version = uuid.uuid4().hex
        req.dag.deleted = False
        self.registry.put_dag(req.dag)
        self._revoke(self.worker_leases.registered_again(req.dag.name, dag=True))
        log.info("registered DAG %s: %s %s", dag.name, dag.functions, dag.connections)
        self._reply(req.response_address, pb.Reply(request_id=req.request_id, status=pb.OK))

    def _delete_dag(self, payload: bytes) -> None:
        req = pb.NameRequest.FromString(payload)
        if self.registry.delete_dag(req.name):
            self._revoke(self.worker_leases.registered_again(req.name, dag=True))
            reply = pb.Reply(request_id=req.request_id, status=pb.OK)
        else:
            reply = pb.Reply(request_id=req.request_id, status=pb.DAG_NOT_FOUND,
                             message=f"delete_dag: no DAG named {req.name!r} is registered")
        self._reply(req.response_address, reply)

    def _delete_fn(self, payload: bytes) -> None:
        req = pb.NameRequest.FromString(payload)
        if self.registry.delete_function(req.name):
            self._revoke(self.worker_leases.registered_again(req.name, dag=False))
            log.info("deleted function %s", req.name)
            reply = pb.Reply(request_id=req.request_id, status=pb.OK)
        else:
            reply = pb.Reply(request_id=req.request_id, status=pb.FUNCTION_NOT_FOUND,
                             message=f"delete_function: no function named {req.name!r} is "
                                     f"registered")
        self._reply(req.response_address, reply)

    def _list(self, payload: bytes) -> None:
        req = pb.NameRequest.FromString(payload)
        functions, dags = self.registry.names()
        self._reply(req.response_address, pb.Reply(request_id=req.request_id, status=pb.OK,
                                                   functions=functions, dags=dags))

    def _info(self, payload: bytes) -> None:
        req = pb.NameRequest.FromString(payload)
        live = self.table.live()
        nodes = sorted(n for n, keys in self.table.node_keys().items() if req.name in keys) \
            if req.name else []
        self._reply(req.response_address, pb.Reply(
            request_id=req.request_id, status=pb.OK, kvs_address=self.config.kvs_address,
            live_workers=len(live), worker_ids=[w.worker_id for w in live], nodes=nodes))

    def _on_registry_update(self, frame: bytes) -> None:
        try:
            message = anna_pb2.KeyResponse.FromString(frame)
            for t in message.tuples:
                if t.error == anna_pb2.NO_ERROR and t.payload:
                    self.registry.on_update(t.key, tuple_to_lattice(t).reveal())
        except Exception as e:
            log.warning("ignored a registry update: %s", e)
