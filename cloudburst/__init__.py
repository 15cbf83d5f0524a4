"""Cloudburst: stateful functions as a service on the Anna KVS. What users import."""
from . import errors  # noqa: F401
