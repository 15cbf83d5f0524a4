"""The Cloudburst client SDK: register functions and DAGs, call them, store objects.

Contract:
- `Client(address)` connects to a scheduler (`tcp://host:port`), or to several
  (`Client([a, b])`, the first preferred), and asks one for the KVS address (`Timeout` names
  the schedulers if none answers); `kvs_address=` replaces that address for the client's
  own `put`/`get` (a client outside the cluster's network). Results, replies and
  acknowledgements come back on one PULL socket of the client's own: the sink's result is
  pushed straight to it; nothing polls the KVS.
- Failover (`cloudburst/channel.py`, which `Client` inherits). A call refused by a stopping
  scheduler (SCHEDULER_STOPPING: it never started there), or whose first attempt a scheduler
  refused for want of resources (NO_RESOURCES, as from a scheduler made again that has not
  heard its executors yet), is sent again, same request id, to a scheduler that has not
  refused it; with none left the refusal is the call's error. A message goes to the
  current scheduler if its connection is up (ZeroMQ `IMMEDIATE`: a message is never queued
  for a scheduler that is not connected), else to the
  next one that is, which becomes current; with none connected within `failover_timeout`
  the send raises `SchedulerUnavailable`. A registry request unanswered within
  `failover_timeout` is sent again, same request id, to the next scheduler (the first answer
  wins). A call is never re-sent (a function may have side effects): a `Future` that has
  waited `failover_timeout` checks its scheduler; if that scheduler's connection dropped
  since the call was sent, or it does not answer a `where` within `failover_timeout`, the
  future fails with `SchedulerUnavailable` naming it (the call may or may not have run; a
  result that arrives later is dropped).
- Registry calls (`register`, `register_dag`, `delete_dag`, `list`) wait for the scheduler's
  answer and raise its typed error (`InvalidDag`, `DagNotFound`, ...).
- `call` / `call_dag` take positional and keyword arguments, which may be `Reference`s and
  `Future`s of other calls (`cloudburst/arguments.py`), and return a `Future` at once; `Future.get(timeout)` returns the value (as
  plain data unless the call, or `get`, says `objects=True`) or raises the typed error
  (`FunctionNotFound`, `DagNotFound`, `NoResources`, `ExecutionError` with the remote
  traceback, `Timeout` naming the stage that stalled, `UnsafeValue`).
- `put` / `get` store and read objects (cloudpickled) in the KVS; `get` of a missing key
  raises `ObjectNotFound`. `get` reads plain data unless given `objects=True`: a value that
  is more raises `UnsafeValue` and runs nothing (`faas/values.py`, docs/SECURITY.md).
  Keys starting with `__cloudburst/` are reserved. With `consistency="causal"` a put writes an `anna_core.MultiKeyCausalLattice` version (clock
  `{client id: counter}`, counter monotone per Client, no dependencies) and a get reads one
  (the first of the sorted concurrent values, or all of them with `concurrent=True`).
- Causal calls (`consistency="causal"`, HydroCache; hydrocache/DESIGN.md) take a `protocol`:
  "ct", "opt", "con" or "hb" (default "hb"); a protocol with "lww" is a ValueError. After
  `get()`, `Future.causal` holds the result's `CausalStats` (protocol, aborts, remote
  fetches, read set and writes as {key: vector clock}); None for LWW calls. A second result
  for a request whose result already arrived is ignored (HB may produce two).
- Sessions: read-your-writes and monotonic reads, on by default (`Client(session=False)`,
  or `session=False` on one call, turns them off). The client keeps a bounded session
  (`hydrocache.session.Session`, `session_keys` floors): the version of every key it put
  (`put`), read (`get`), or saw a call read or write (each result's `CallResult.session`
  and `CausalStats`). Every call carries it, and every read the call makes, plain or causal,
  through any function of the DAG, returns that version of the key or a newer one; a `get`
  returns one at least as new as the session's too. Beyond `session_keys` keys the oldest
  are summed up (module contract of `hydrocache/session.py`): still guaranteed, at the cost
  of more reads from the KVS. A `delete` counts as a write: afterwards the client's calls and
  gets read the key as absent, or as a value written after the delete.
- A Client may be shared by threads: sends are serialized by a lock, and whichever thread is
  waiting reads the socket and hands each answer to the thread waiting for it
  (`cloudburst/channel.py`).
- Authentication (`runtime.auth`). With `auth=AuthConfig(key_dir, "client:NAME")` the client
  reads `key_dir/cluster.key`, `key_dir/function.key` (KeyFileError naming it when missing)
  and `key_dir/clients/NAME.key_secret`; its answer socket is a CURVE server admitting the
  cluster's key and the function key (executor workers, which may send it only results),
  and it connects to each scheduler as a CURVE
  client of the key in the scheduler's address (`tcp://host:port#k=<hex>`), or of the
  cluster's key when the address has none. An address with a key and no `auth` raises
  `AuthenticationRequired` at once. A handshake the cluster refuses (an unknown key, keys
  given to a cluster that has none, a client without keys given a bare address) fails the
  request with `AuthenticationError` naming the scheduler and the reason, as soon as the
  refusal is seen (nothing was sent). Without `auth` and with plain addresses, everything is
  plain, as before.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import (Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import zmq

from hydro_proto import cloudburst_pb2 as pb

from runtime.actors import ActorHandle
from runtime.auth import (FUNCTION, AuthConfig, KeyFileError, Security, credentials_of,
                          parse_address)
from faas.keys import check_user_key
from runtime.sockets import bind_pull, check_address, ipc_dir_of
from anna_core.config import DEFAULT_MAX_VALUE_BYTES
from faas.values import too_large, transport
from .arguments import Encoded, encode_into, futures_in, merge_keywords
from .errors import AuthenticationRequired, InvalidDag, InvalidFunction
from .pickling import dumps_function
from . import actors as _actors
from .big_values import Courier
from .call_templates import CallTemplates
from .functions import RegisteredFunction, check_signature
from .futures import Future, gather
from .channel import ClientLink, SchedulerChannel, finished_notes
from .client_objects import ClientObjects
from .direct import DirectPath
from .connections import HOW_TO_AUTHENTICATE, SchedulerConnections
from .objects import ObjectStore
from .options import _consistency_and_protocol, _retry_policy, _time_limit
from .leases import ClientLeases
from .status import ClusterStatus
from hydrocache.session import DEFAULT_MAX_KEYS, Session
from .sessions import ClientSession, named_keys

__all__ = ["Client", "Listing"]

log = logging.getLogger("cloudburst.client")


class Listing(NamedTuple):
    """What `Client.list()` returns: registered function and DAG names, sorted."""

    functions: List[str]
    dags: List[str]


class Client(SchedulerChannel, ClientObjects):
    """A connection to a Cloudburst cluster; see the module contract.

    Args:
        address: a scheduler's address, e.g. `LocalCluster.address`, or a list of them (the
            first preferred; `LocalCluster.client()` passes all).
        timeout: default seconds to wait for any answer (and a call's default deadline).
        ip: local address to bind the answer socket on (must be reachable by the cluster).
        failover_timeout: seconds of silence from a scheduler before a request goes to the
            next one, or before a call waiting on it checks that it is still there.
        auth: this client's identity and key directory, `AuthConfig(key_dir, "client:NAME")`,
            for a cluster that authenticates (see the module contract); None: plain.
        kvs_address: the KVS routing address for `put`/`get` (None: the one the scheduler
            reports, which is the cluster's own, e.g. a Kubernetes Service name that only
            resolves inside the cluster; a client outside passes one it reaches).
        lease_ttl: seconds a scheduler keeps this client's calls after its last sign of life
            (renewed every quarter of it while calls are in flight): a client killed while
            waiting has its calls cancelled after at most this long.
        session: read-your-writes and monotonic reads into every call (module contract);
            False turns them off for this client.
        session_keys: how many keys' versions the session keeps exactly.
        direct: send calls straight to a worker this client holds a scheduler-granted lease
            on (`cloudburst/direct.py`; the default): the first call of a function or DAG
            asks for the lease, later ones skip the scheduler. A lease whose worker is held
            up by a long call is passed over (`cloudburst/stalls.py`): the calls made
            meanwhile go through the scheduler, which places them on a free worker. Calls that cannot go direct
            (causal, actor, `output_key`, `Reference` arguments, which the scheduler places
            where their keys are cached, `Future` arguments, large arguments, exception
            retries) take the scheduler's path, and so does every call where no lease is
            granted (e.g. workers a worker host runs). False: every call through the
            scheduler.
    """

    def __init__(self, address: Union[str, Sequence[str]], *, timeout: float = 30.0,
                 ip: str = "127.0.0.1", failover_timeout: float = 3.0,
                 auth: Optional[AuthConfig] = None,
                 kvs_address: Optional[str] = None, session: bool = True,
                 session_keys: int = DEFAULT_MAX_KEYS, lease_ttl: float = 5.0,
                 direct: bool = True) -> None:
        addresses = [address] if isinstance(address, str) else list(address)
        if not addresses:
            raise ValueError("a Client needs at least one scheduler address")
        self.addresses = [check_address(a, "a scheduler") for a in addresses]
        if auth is not None and not isinstance(auth, AuthConfig):
            raise TypeError(f"auth must be a cloudburst.AuthConfig, not {type(auth).__name__}")
        keyed = [a for a in self.addresses if parse_address(a)[1] is not None]
        if auth is None and keyed:
            raise AuthenticationRequired(
                f"the cluster at {keyed[0]} requires authentication (its address carries the "
                f"scheduler's key) and this client has no keys: {HOW_TO_AUTHENTICATE}")
        self.auth = auth
        self._current = 0
        self.timeout = float(timeout)
        self.failover_timeout = max(0.1, float(failover_timeout))
        self._context = zmq.Context()
        try:
            self._security = Security.start(self._context, auth)  # KeyFileError naming a file
        except BaseException:
            self._context.term()
            raise
        creds = credentials_of(self._security)
        if creds is not None and FUNCTION not in creds.allowed.values():
            self._security.stop()
            self._context.term()
            raise KeyFileError(f"{auth.key_dir} has no function.key, the public key of the "
                               f"workers that send this client its results: copy it from the "
                               f"cluster's key directory")
        # a cluster reached over Unix sockets (LocalCluster(transport="ipc")) answers on one too
        # answers come from schedulers (cluster key) and results from executor workers
        # (function key), which may send only `result`
        self._pull, self.response_address = bind_pull(self._context, ip,
                                                      ipc_dir=ipc_dir_of(self.addresses[0]),
                                                      auth=creds, audience=FUNCTION)
        self._connections = SchedulerConnections(self._context, self.addresses, creds, auth)
        self._send_lock = threading.Lock()
        self._mutex = threading.RLock()             # the answer lock
        self._cond = threading.Condition(self._mutex)
        self._waiting = 0            # threads waiting on _cond for the reading one
        self._slots: Dict[str, Any] = {}   # request id -> its answer slot (channel)
        # calls in flight -> (the Call, the schedulers that refused it): sent again to
        # another scheduler when theirs is stopping (channel)
        self._kept_calls: Dict[str, Any] = {}
        self._refused: List[Any] = []
        self._reading = False
        # results received, to tell the scheduler with the next call through it (bounded)
        self._finished = finished_notes()
        self._prefix = uuid.uuid4().hex[:10]
        self.client_id = f"client-{self._prefix}"   # this client's vector clock entry
        self._seq = 0
        self._objects: Optional[ObjectStore] = None
        self._session = ClientSession(session_keys) if session else None
        self.closed = False
        self._leases = ClientLeases(self, lease_ttl)
        self._templates = CallTemplates()    # each call starts from a prepared copy
        self._link = ClientLink(self)      # what Futures and the direct path see of this client
        self._direct = DirectPath(self._link, self._context, creds) if direct else None
        try:
            info = self._ask("info", pb.NameRequest(),
                             "answer `info` (is a scheduler running there?)",
                             min(self.timeout, 10.0 * len(self.addresses)))
        except BaseException:
            self.close()
            raise
        self.kvs_address: str = kvs_address or info.kvs_address
        self._kvs_given = kvs_address is not None
        self._kvs_learnt = time.monotonic()     # when the schedulers last named the KVS
        try:
            self._objects = ObjectStore(self.kvs_address, ip, auth, self.client_id,
                                        self._context)
            self._courier = Courier(lambda: None if self.closed else
                                    self._objects_now("move a large value"),
                                    DEFAULT_MAX_VALUE_BYTES,
                                    self.client_id)
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        """The scheduler this client currently talks to."""
        return self.addresses[self._current]

    # ---- registry ----
    def register(self, function: Any, name: str, *, time_limit: Optional[float] = None,
                 modules: Sequence[Any] = (), max_retries: Optional[int] = None,
                 retry_exceptions: Any = None) -> None:
        """Register `function` under `name`: a function, or `(cls, init_args)` (or a bare
        class) for a stateful class whose instance's `run` (or `__call__`) is called; one
        instance per executor worker lives across calls (instances are not addressable:
        state a caller needs to reach belongs in the KVS, or in an actor: `actor`). A function whose first parameter
        is named `lib` receives the user library there (`def f(lib, x)`); any other gets
        only its arguments (`def f(x)`; `cloudburst.lib()` reaches the library). `async def`
        functions are awaited on the worker. What cannot run (a generator function, a
        non-callable, a `lib` that is not the first parameter) raises `InvalidFunction`.

        `time_limit` is how many seconds one call of it may run (default: the cluster's);
        past it the function is stopped and its call fails with `Timeout` naming it.

        The function's own module travels with it when it is your code (a script or a file
        next to it, not an installed package). Other modules it uses must be importable on
        the executors, or be listed in `modules` (module objects) to be shipped by value.

        Retries (at least once): a call whose worker or node dies runs again elsewhere, up
        to `max_retries` more times (default: the cluster's, 3); with `retry_exceptions`
        (True, or exception classes) a call whose function raised one runs again too,
        from the same budget. A call may override both."""
        stateful = False
        if isinstance(function, tuple) and len(function) == 2 and isinstance(function[0], type):
            cls, init_args = function
            body, stateful = (cls, tuple(init_args)), True
        elif isinstance(function, type):
            cls, body, stateful = function, (function, ()), True
        elif callable(function):
            body = function
        else:
            raise InvalidFunction(f"register takes a function or (class, init_args), got "
                                  f"{function!r}, which is not callable")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a function name must be a non-empty str, got {name!r}")
        check_signature(body[0] if stateful else body, name, stateful)
        record = pb.FunctionRecord(name=name, body=dumps_function(body, modules),
                                   stateful=stateful,
                                   time_limit=_time_limit(time_limit))
        retry = _retry_policy(max_retries, retry_exceptions)
        if retry is not None:
            record.retry.CopyFrom(retry)
        self._ask("register_fn", pb.RegisterFunction(function=record),
                  f"register function {name!r}")

    def function(self, target: Any = None, *, name: Optional[str] = None,
                 time_limit: Optional[float] = None, max_retries: Optional[int] = None,
                 retry_exceptions: Any = None) -> Any:
        """Decorator: register a function (or a stateful class) under `name` (default: its
        `__name__`) and return a `RegisteredFunction` whose call returns a `Future`.

        Use as `@client.function` or `@client.function(name="other")`."""
        def register(obj: Any) -> RegisteredFunction:
            registered = name or getattr(obj, "__name__", None)
            if not registered:
                raise ValueError(f"{obj!r} has no __name__; pass name=")
            self.register(obj, registered, time_limit=time_limit, max_retries=max_retries,
                          retry_exceptions=retry_exceptions)
            return RegisteredFunction(self, registered, obj)
        return register if target is None else register(target)

    def register_dag(self, name: str, functions: Sequence[str],
                     connections: Sequence[Tuple[str, str]] = ()) -> None:
        """Register a DAG; connections are (src, dst) pairs. Raises `InvalidDag` with the reason."""
        record = pb.DagRecord(name=name, functions=list(functions))
        for c in connections:
            if len(c) != 2:
                raise InvalidDag(f"DAG {name!r}: connection {tuple(c)!r} is not a (src, dst) pair")
            record.connections.add(source=c[0], target=c[1])
        self._ask("register_dag", pb.RegisterDag(dag=record), f"register DAG {name!r}")

    def delete_function(self, name: str) -> None:
        """Delete function `name`: later calls of it (and of DAGs using it) fail with
        `FunctionNotFound`; raises `FunctionNotFound` if it is not registered."""
        self._ask("delete_fn", pb.NameRequest(name=name), f"delete function {name!r}")

    def delete_dag(self, name: str) -> None:
        """Delete DAG `name`; raises `DagNotFound` if it is not registered."""
        self._ask("delete_dag", pb.NameRequest(name=name), f"delete DAG {name!r}")

    def list(self) -> Listing:
        """Registered function and DAG names."""
        reply = self._ask("list", pb.NameRequest(), "list the registry")
        return Listing(list(reply.functions), list(reply.dags))

    def executors(self) -> List[str]:
        """Ids of the executor workers the scheduler currently considers live."""
        return list(self._ask("info", pb.NameRequest(), "answer `info`").worker_ids)

    def status(self) -> ClusterStatus:
        """What the scheduler sees: live workers (busy, calls, restarts) and, per function
        or DAG, the calls it placed (count, errors, p50/p99 latency, in flight)."""
        return ClusterStatus.from_reply(self.address, self._ask("status", pb.NameRequest(),
                                                                "answer `status`"))

    def cached_at(self, key: str) -> List[str]:
        """The executor nodes whose cache (as last reported to the scheduler) holds `key`."""
        return list(self._ask("info", pb.NameRequest(name=key), "answer `info`").nodes)

    # ---- calls ----
    def call(self, name: str, *args: Any, timeout: Optional[float] = None,
             consistency: str = "lww", protocol: Optional[str] = None,
             time_limit: Optional[float] = None, objects: bool = False,
             session: Optional[bool] = None, kwargs: Optional[Mapping[str, Any]] = None,
             max_retries: Optional[int] = None, retry_exceptions: Any = None,
             **keywords: Any) -> Future:
        """Call registered function `name` with `args` and keyword arguments: `keywords`
        other than the options below, and `kwargs` (a mapping, for names that are options).
        An argument may be a `Future` of another call: its value is passed, fetched where
        the function runs (`DependencyFailed` if that call failed). `consistency`,
        `protocol`, `timeout`, `time_limit`, `objects`, `session`, `max_retries` and
        `retry_exceptions` as for `call_dag` (a single function is a one-function DAG)."""
        level, proto = _consistency_and_protocol(consistency, protocol)
        call = self._templates.new(name, False, level, proto, _time_limit(time_limit))
        retry = _retry_policy(max_retries, retry_exceptions)
        if retry is not None:
            call.retry.CopyFrom(retry)
        arglist = call.args[name]
        encoded = encode_into(arglist, args, merge_keywords(kwargs, keywords))
        stored = self._courier.externalize(name, arglist, level == pb.LWW, encoded.largest)
        return self._submit(call, f"call of function {name!r}", timeout, objects, session,
                            stored, futures_in(args, keywords, kwargs or {}),
                            encoded.references)

    def map(self, name: str, *iterables: Iterable[Any], timeout: Optional[float] = None,
            **options: Any) -> List[Any]:
        """Call function `name` once per item (with several iterables, once per tuple of
        items, as the builtin `map`), all at once, and return the values in order. `timeout`
        bounds the whole map; the first error met in order is raised."""
        if not iterables:
            raise TypeError("map needs at least one iterable of arguments")
        futures = [self.call(name, *args, timeout=timeout, **options)
                   for args in zip(*iterables)]
        return gather(futures, timeout)

    def call_dag(self, name: str, args: Optional[Mapping[str, Sequence[Any]]] = None,
                 consistency: str = "lww", output_key: Optional[str] = None,
                 timeout: Optional[float] = None, protocol: Optional[str] = None,
                 time_limit: Optional[float] = None, objects: bool = False,
                 session: Optional[bool] = None,
                 kwargs: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 max_retries: Optional[int] = None, retry_exceptions: Any = None) -> Future:
        """Call DAG `name`; `args` maps a function to its own arguments (a list or tuple),
        `kwargs` to its own keyword arguments (a dict). Either may hold `Future`s of other
        calls (see `call`).

        A function receives its own positional arguments first, then its upstreams' results
        in the order the connections were registered, then its keyword arguments. The sink's result is the call's value, also
        stored under `output_key` when given. `consistency` is "lww" (default) or "causal"
        (transactional causal consistency through HydroCache); with "causal", `protocol` is
        "ct", "opt", "con" or "hb" (default "hb"). A protocol with "lww" is a ValueError.

        `timeout` (default: the client's) is the call's deadline: past it the caller gets
        `Timeout` and the call is cancelled, so nothing keeps running for a caller that gave
        up. `time_limit` overrides each function's own limit for this call.

        Retries are at least once: a call whose worker or node died runs again (the whole
        DAG, on live workers) up to `max_retries` more times (default: the smallest of its
        functions', else the cluster's, 3), and with `retry_exceptions` (True, or exception
        classes) also when a function raised one; the same budget counts both. A causal
        call runs again only when it did not commit. When the budget is spent, the caller
        gets `WorkerDied` (or the function's `ExecutionError`), whose `attempts` says how
        many ran. While the caller waits, interrupts `get`, closes the client or exits, the
        call is cancelled; a call with `output_key` is not (it is fire-and-forget) unless
        `Future.cancel()` is called.

        The result is read as plain data, like `get`: a result that is more (an instance
        of a class, a numpy array) makes `Future.get` raise `UnsafeValue` without running
        anything, unless `objects=True` here (or on `Future.get`). The function that made
        it is whatever was last registered under its name, by any client the cluster
        authorizes, so ask for objects from functions whose registrants you trust.

        Every read the call makes returns what this client wrote or read before, or newer
        (read-your-writes and monotonic reads; module contract); `session=False` skips that
        for this call (None: as the client says).
        """
        level, proto = _consistency_and_protocol(consistency, protocol)
        call = self._templates.new(name, True, level, proto, _time_limit(time_limit))
        if output_key:
            call.output_key = check_user_key(output_key)
        retry = _retry_policy(max_retries, retry_exceptions)
        if retry is not None:
            call.retry.CopyFrom(retry)
        stored: List[str] = []
        encoded: Dict[str, Encoded] = {}
        try:
            for fn, fn_args in (args or {}).items():
                if not isinstance(fn_args, (list, tuple)):
                    raise TypeError(f"arguments for {fn!r} must be a list or tuple, got "
                                    f"{type(fn_args).__name__}")
                encoded[fn] = encode_into(call.args[fn], fn_args,
                                          merge_keywords(kwargs.get(fn), {}) if kwargs else {})
            for fn, fn_kwargs in (kwargs or {}).items():
                if fn not in encoded:
                    encoded[fn] = encode_into(call.args[fn], (), merge_keywords(fn_kwargs, {}))
            for fn in sorted(encoded):
                stored += self._courier.externalize(fn, call.args[fn], level == pb.LWW,
                                                    encoded[fn].largest)
        except BaseException:
            self._courier.release(stored)
            raise
        inputs = futures_in(*(args or {}).values(), *(kwargs or {}).values())
        return self._submit(call, f"call of DAG {name!r}", timeout, objects, session,
                            stored, inputs,
                            [key for fn in sorted(encoded) for key in encoded[fn].references])

    def _submit(self, call: pb.Call, what: str, timeout: Optional[float],
                objects: bool, session: Optional[bool] = None,
                stored: Sequence[str] = (), inputs: Sequence[Future] = (),
                references: Optional[Sequence[str]] = None) -> Future:
        wait = self.timeout if timeout is None else float(timeout)
        if self._session is not None and session is not False:
            self._session.attach(call, named_keys(call))
        rid = self._new_slot()
        call.request_id = rid
        call.response_address = self.response_address
        call.timeout = wait
        # fire-and-forget calls outlive their caller: those storing their result under an
        # output_key, and actor calls (each changes the actor's state, in order)
        keep = bool(call.output_key) or call.HasField("actor")
        if not keep:
            call.lease_ttl = self._leases.ttl
        # its scheduler deletes them when the call is over, even if this client is gone
        if stored:
            call.value_keys.extend(stored)
        sent_at = time.monotonic()
        scheduler = None
        if self._direct is not None and self._direct.eligible(call, stored, inputs,
                                                                    references):
            scheduler = self._direct.send(call)      # straight to a leased worker, if any
        if scheduler is None:
            if self._finished:
                with self._cond:
                    finished, self._finished = self._finished, finished_notes()
                call.finished.extend(finished)
            # kept before it goes: a refusal answered at once finds it kept and is resent
            self._keep_call(rid, call, self.address, sent_at)
            try:
                scheduler = self._send("call", call)
            except BaseException:
                self._forget(rid)
                self._courier.release(stored)
                raise
        if not keep:
            self._leases.hold(rid, scheduler)
        self._keep_call(rid, call, scheduler, sent_at)
        if self._direct is not None:
            self._direct.flush()         # lease requests and renewals, after the call
        self._templates.restock()        # the next call's copy, made while this one is out
        return Future(self._link, rid, what, wait, scheduler=scheduler, sent_at=sent_at,
                      objects=objects, stored=stored, fire_and_forget=keep,
                      consistency="causal" if call.consistency == pb.CAUSAL else "lww",
                      inputs=inputs)

    # ---- actors (cloudburst/actors.py; README "Actors") ----
    def actor(self, cls: type, *args: Any, **kwargs: Any) -> ActorHandle:
        """Create an actor: one instance of `cls`, built as `cls(*args, **kwargs)` on one
        executor worker the scheduler chooses, and return its handle once it is built.

        `handle.method(...)` returns a `Future`; the actor's calls run one at a time on that
        instance, and the calls this client makes through one scheduler run in the order it
        made them. A method that raises fails that call only. A handle can be passed to
        functions (as an argument), which call the same instance. When the actor's worker
        dies the instance and its state are lost: the call running and the calls queued fail
        with `ActorDied` naming the actor. By default it is not re-created, and later calls
        fail too (keep what must survive in the KVS); `create_actor(..., max_restarts=n)`
        re-creates it, as Ray does. `InvalidFunction` if `cls(*args, **kwargs)` cannot
        bind; `ExecutionError` if the constructor raises. `create_actor` takes options."""
        return self.create_actor(cls, args, kwargs)

    def create_actor(self, cls: type, args: Sequence[Any] = (),
                     kwargs: Optional[Mapping[str, Any]] = None, *,
                     timeout: Optional[float] = None,
                     modules: Sequence[Any] = (), max_restarts: int = 0) -> ActorHandle:
        """`actor(cls, *args, **kwargs)` with options: `timeout` bounds the creation (default:
        the client's); `modules` are shipped by value with the class, as for `register`.

        `max_restarts` (Ray's name and meaning; default 0): how many times the actor is
        re-created after its worker dies (-1: without limit). A re-created actor runs its
        constructor again, with the same arguments, on another worker: its state starts
        afresh. The calls running or queued on the dead worker fail with `ActorDied` (they
        are not run again); calls made after go to the new instance. Once the restarts are
        spent, the next death is final."""
        call, what, handle = _actors.creation(cls, args, kwargs or {}, modules, max_restarts)
        if transport(len(call.actor.body), self._courier.limit) == "too_large":
            raise too_large(f"the class and constructor arguments of {what}",
                            len(call.actor.body), self._courier.limit)
        self._submit(call, what, timeout, False).get()
        return handle.bind(self)

    def kill(self, handle: ActorHandle, timeout: Optional[float] = None) -> None:
        """Kill the actor of `handle` (same as `handle.kill()`): the calls sent before the kill
        still run, later ones raise `ActorDied`. Killing a dead actor succeeds."""
        self.kill_actor(handle, timeout)

    def call_actor(self, handle: ActorHandle, method: str, args: Sequence[Any],
                   kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> Future:
        """Send one method call of `handle`'s actor (what `handle.method(...)` does);
        `options`: `timeout` and `objects`, as for `call`."""
        call, what = _actors.method_call(handle, method, args, kwargs)
        # sized as a function's arguments: by reference above 1 MiB, ValueTooLarge above the
        # KVS's maximum before anything is sent (cloudburst/big_values.py)
        stored = self._courier.externalize(call.function, call.args[method])
        return self._submit(call, what, options.get("timeout"), bool(options.get("objects")),
                            stored=stored, inputs=futures_in(args, kwargs))

    def kill_actor(self, handle: ActorHandle, timeout: Optional[float] = None) -> None:
        """What `kill` and `handle.kill()` do."""
        call, what = _actors.kill_call(handle)
        self._submit(call, what, timeout, False).get()

    @property
    def worker_leases(self) -> List[Dict[str, Any]]:
        """The worker leases this client holds now (`direct=True`; else []): for each, the
        `target` (function or DAG name), `dag`, `worker_id`, `slots` and calls `in_flight`."""
        if self._direct is None:
            return []
        self._read_arrived()          # grants and revocations that came meanwhile
        return self._direct.held()

    @property
    def session(self) -> Optional[Session]:
        """This client's session (None when off): the floors its calls carry."""
        return None if self._session is None else self._session.session

    def _observed(self, result: Optional[pb.CallResult]) -> None:
        """A call's result arrived: the session notes what the call read and wrote."""
        if self._session is not None:
            self._session.observed(result)

    # ---- lifecycle ----
    def close(self) -> None:
        """Close the sockets (idempotent)."""
        if self.closed:
            return
        self._leases.leave()          # the calls still in flight are cancelled
        if self._direct is not None:
            self._direct.close()      # its leases go back to their schedulers
        self.closed = True
        if self._objects is not None:
            self._objects.close()
        self._connections.close()
        self._pull.close(0)
        if self._security is not None:
            self._security.stop()
        self._context.term()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
