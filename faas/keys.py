"""KVS key names of Cloudburst's own records (registry, worker directory, actors).

User objects may use any key that does not start with `PREFIX`. Large call arguments and
results travel through the KVS under `VALUES_PREFIX` (a key a function may write; each is
deleted once its call is over: by the client, and by the call's scheduler,
scheduler/values.py).
"""
import uuid

PREFIX = "__cloudburst/"
FUNCTIONS_INDEX = PREFIX + "index/functions"
DAGS_INDEX = PREFIX + "index/dags"


def function_key(name: str) -> str:
    return f"{PREFIX}fn/{name}"


def dag_key(name: str) -> str:
    return f"{PREFIX}dag/{name}"


VALUES_PREFIX = "__values/"


def value_key(owner: str) -> str:
    """A fresh key for one large argument or result of `owner` (a call id or a client)."""
    return f"{VALUES_PREFIX}{owner}/{uuid.uuid4().hex}"


def intermediate_key(call_id: str, function: str) -> str:
    """The key of function `function`'s result in call (attempt) `call_id`, passed to the
    call's downstream functions by reference: one per function and attempt, so its
    scheduler and a test can name it."""
    return f"{VALUES_PREFIX}{call_id}/{function}"


def worker_key(worker_id: str) -> str:
    return f"{PREFIX}worker/{worker_id}"


def actor_key(actor_id: str) -> str:
    """Where an actor's record (`cloudburst.ActorRecord`: its worker) is stored."""
    return f"{PREFIX}actor/{actor_id}"


def check_user_key(key: str) -> str:
    """Raise ValueError for a key that is empty, not a str, or in Cloudburst's namespace."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a key must be a non-empty str, got {key!r}")
    if key.startswith(PREFIX):
        raise ValueError(f"keys starting with {PREFIX!r} are reserved for Cloudburst: {key!r}")
    return key
