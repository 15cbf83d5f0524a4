"""One way to configure a process: its role's configuration object, read from a file or
JSON, with command-line flags only as overrides.

Contract:
- A role's configuration is a dataclass whose fields are declared with `knob(...)`, so that
  every field carries its help text, and whose `ROLE` class attribute names the role
  ("scheduler", "anna node", ...). The class' own `__post_init__` checks what depends on
  several fields or on values (ranges), raising ValueError that names the field.
- `from_dict(cls, data)` builds the object from a JSON-ready mapping. An unknown field, a
  missing required field or a value of the wrong type raises `ConfigError` naming the role
  and the field; a ValueError of the class' own checks becomes a ConfigError naming the role
  (and the first field its message names). Nested dataclasses are read from nested objects,
  a class with a `coerce` classmethod (`anna_core.Replication`) through it, and lists become
  tuples where the field is a tuple. Ints are accepted where a float is expected.
- A string field (or a string in a list field) may refer to environment variables as
  `${NAME}` (`"node_id": "${POD_NAME}"`): the loader puts in their values, so one
  configuration serves every pod, each with its own name and address. A value that is one
  reference alone, in a field that is not a string, is the variable's text read as JSON
  (`"port": "${WORKER_PORT}"`). A variable that is not set raises ConfigError naming the
  field and the variable; one set but empty gives "" (None in an optional field when it is
  the whole value: `"key_dir": "${KEY_DIR}"`).
- A list of strings may be given as one comma-separated string, and its strings are split
  at commas (`"routing": ["${ANNA_ROUTING}"]` with several addresses), as on the command line.
- An address field may name its server's key as `#k=cluster` (`tcp://anna-routing:6450#k=
  cluster`): the loader replaces it with the cluster's public key read from the
  configuration's own `key_dir` (`<key_dir>/cluster.key`), so one configuration file serves
  every pod, whatever keys the cluster was given (`${NAME}#k=cluster` marks every address of
  a comma-separated list in NAME); without `key_dir` (authentication off) the mark is
  dropped; with no readable key there, a ConfigError names the field.
- `to_dict(config)` is the JSON-ready mapping `from_dict` reads back to an equal object.
- `read_config_text(text)`: the value of `--config`, either a JSON object written inline
  (it starts with "{" or "[") or the path of a file holding one ("@path" is read as the
  path). A missing file or bad JSON raises ConfigError naming the file.
- `add_config_arguments(parser, cls)` adds `--config PATH|JSON` and one flag per field
  (`--field-name`, with the field's help and default), none of which has a value unless
  given. Flag syntax by field type: int, float, str as themselves; bool as `--x`/`--no-x`;
  a list of strings as repeated flags or comma-separated; an Optional number "none" for
  None, an Optional string "" for None; anything else as JSON (a bare word is a string).
- `role_parser(cls, prog, description)` is a process' parser with those arguments.
- `config_from_args(cls, args)`: the `--config` values, then every flag given over them (a
  mapping-valued field merges key by key), then `from_dict`.
- `parse_config(parser, cls, argv)` parses `argv` and returns `(config, args)`; a
  ConfigError ends the process with argparse's one-line usage error (status 2) naming the
  role and the field, never a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import typing
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Type, TypeVar

__all__ = ["ConfigError", "knob", "help_of", "role_of", "from_dict", "to_dict",
           "read_config_text", "add_config_arguments", "role_parser", "config_from_args",
           "parse_config", "CONFIG_HELP", "CLUSTER_KEY_REFERENCE", "positive"]

T = TypeVar("T")
_MISSING = dataclasses.MISSING
CONFIG_HELP = ("the process' configuration: a JSON object, or the path of a file holding one "
               "(every option below overrides the field of the same name)")


class ConfigError(ValueError):
    """A configuration that cannot be used; `role` and `field` (None when no single field
    is at fault) name what is wrong."""

    def __init__(self, role: str, field: Optional[str], problem: str) -> None:
        self.role = role
        self.field = field
        self.problem = problem
        where = f"{role} configuration" + (f", field {field!r}" if field else "")
        super().__init__(f"{where}: {problem}")


def knob(default: Any = _MISSING, *, help: str, factory: Any = _MISSING) -> Any:  # noqa: A002
    """A configuration field with its help text: `knob(0, help=...)`, `knob(help=...)` for a
    required field, `knob(factory=list, help=...)` for a mutable default."""
    if factory is not _MISSING:
        return dataclasses.field(default_factory=factory, metadata={"help": help})
    if default is _MISSING:
        return dataclasses.field(metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def help_of(cls: type, name: str) -> str:
    """The help text of field `name` of configuration class `cls` ("" when it has none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("help", "")
    raise KeyError(name)


def role_of(cls: type) -> str:
    """The role a configuration class configures (its class name when it names none)."""
    return getattr(cls, "ROLE", cls.__name__)


# ---- values -------------------------------------------------------------------------------

def _hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(hint: Any) -> str:
    if hint in (int, float, str, bool):
        return {int: "an int", float: "a number", str: "a string", bool: "true or false"}[hint]
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


class _Bad(Exception):
    """A value does not fit its field's type (internal: becomes a ConfigError)."""


def _coerce(value: Any, hint: Any, role: str, field: str) -> Any:
    """`value` read as type `hint`; _Bad naming what was expected."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, role, field)
            except _Bad as e:
                errors.append(str(e))
        expected = " or ".join(_type_name(a) for a in args if a is not type(None))
        raise _Bad(f"expected {expected}{' or null' if type(None) in args else ''}, "
                   f"got {value!r}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Bad(f"expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Bad(f"expected an int, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _Bad(f"expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Bad(f"expected a string, got {value!r}")
    if origin in (list, typing.List, Sequence, typing.Sequence) or hint is list:
        if not isinstance(value, (list, tuple)):
            raise _Bad(f"expected a list, got {value!r}")
        item = args[0] if args else Any
        return [_coerce(v, item, role, field) for v in value]
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Bad(f"expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], role, field) for v in value)
        if args and len(args) != len(value):
            raise _Bad(f"expected a list of {len(args)}, got {value!r}")
        return tuple(_coerce(v, a, role, field) for v, a in zip(value, args or [Any] * len(value)))
    if origin in (dict, Mapping, typing.Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise _Bad(f"expected a JSON object, got {value!r}")
        return dict(value)
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        if hasattr(hint, "coerce"):
            try:
                return hint.coerce(value)
            except (ValueError, TypeError) as e:
                raise _Bad(str(e)) from None
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            return from_dict(hint, value, role=role, prefix=f"{field}.")
    raise _Bad(f"expected {_type_name(hint)}, got {value!r}")


def _field_named_in(message: str, names: Iterable[str]) -> Optional[str]:
    """The field whose name comes first in `message` (None when it names none)."""
    found = []
    for name in names:
        m = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message)
        if m:
            found.append((m.start(), name))
    return min(found)[1] if found else None


_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}(#k=cluster)?")


def _expand(value: Any, environ: Mapping[str, str], role: str, field: str) -> Any:
    """`value` with every `${NAME}` in it (or in its strings, for a list) replaced by the
    environment variable NAME; ConfigError naming the field when NAME is not set."""
    if isinstance(value, list):
        return [_expand(v, environ, role, field) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(match: "re.Match[str]") -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(role, field, f"refers to ${{{name}}}, and the environment "
                              f"variable {name} is not set")
        if match.group(2):           # ${NAME}#k=cluster: every address NAME holds is marked
            return ",".join(a.strip() + CLUSTER_KEY_REFERENCE
                            for a in environ[name].split(",") if a.strip())
        return environ[name]
    return _REFERENCE.sub(lookup, value)


def from_dict(cls: Type[T], data: Mapping[str, Any], *, role: Optional[str] = None,
              prefix: str = "", environ: Optional[Mapping[str, str]] = None) -> T:
    """The configuration object `cls` from `data` (see the module contract); `environ`
    (default: this process' environment) resolves `${NAME}` references."""
    role = role or role_of(cls)
    environ = os.environ if environ is None else environ
    if not isinstance(data, Mapping):
        raise ConfigError(role, prefix.rstrip(".") or None,
                          f"expected a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(role, prefix + unknown[0],
                          f"unknown field (known: {', '.join(sorted(fields))})")
    hints = _hints(cls)
    values: Dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is _MISSING and f.default_factory is _MISSING:   # type: ignore
                raise ConfigError(role, prefix + name, "is required: give it in --config or "
                                  f"as --{name.replace('_', '-')}")
            continue
        raw = data[name]
        value = _expand(raw, environ, role, prefix + name)
        inner, optional = _optional_inner(hints[name])
        if isinstance(raw, str) and _REFERENCE.fullmatch(raw):
            if optional and value == "":
                value = None         # "key_dir": "${KEY_DIR}" with KEY_DIR empty: none
            elif inner is not str and not _is_str_list(inner):
                try:                 # "port": "${WORKER_PORT}": the variable's text as JSON
                    value = json.loads(value)
                except json.JSONDecodeError:
                    pass             # left a string: the type check below names the field
        if _is_str_list(inner) and isinstance(value, (str, list)):
            # a list of strings (addresses) may be one comma-separated string, or have
            # such strings in it ("${ANNA_ROUTING}"), as on the command line
            items = [value] if isinstance(value, str) else value
            if all(isinstance(v, str) for v in items):
                value = [part.strip() for v in items for part in v.split(",") if part.strip()]
        try:
            values[name] = _coerce(value, hints[name], role, prefix + name)
        except _Bad as e:
            raise ConfigError(role, prefix + name, str(e)) from None
    _resolve_cluster_key(cls, values, role, prefix)
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        text = str(e)
        field = _field_named_in(text, fields)
        raise ConfigError(role, prefix + field if field else None, text) from None


CLUSTER_KEY_REFERENCE = "#k=cluster"


def _resolve_cluster_key(cls: type, values: Dict[str, Any], role: str, prefix: str) -> None:
    """Replace `#k=cluster` in every address field of `values` by the cluster's public key,
    read from the configuration's own `key_dir` (ConfigError naming the field otherwise)."""
    named = {name: value for name, value in values.items()
             if CLUSTER_KEY_REFERENCE in (value if isinstance(value, str) else
                                          " ".join(v for v in value if isinstance(v, str))
                                          if isinstance(value, list) else "")}
    if not named:
        return
    from .auth import ADDRESS_KEY_MARK, CLUSTER, KeyPair
    first = sorted(named)[0]
    key_dir = values.get("key_dir")
    if not key_dir:              # authentication off: plain addresses
        for name, value in named.items():
            values[name] = value.replace(CLUSTER_KEY_REFERENCE, "") if isinstance(value, str) \
                else [v.replace(CLUSTER_KEY_REFERENCE, "") for v in value]
        return
    path = os.path.join(key_dir, CLUSTER + ".key")
    try:
        public_hex = KeyPair.load(path).public_hex
    except (OSError, ValueError) as e:
        raise ConfigError(role, prefix + first, f"{CLUSTER_KEY_REFERENCE}: {e}") from None
    keyed = ADDRESS_KEY_MARK + public_hex
    for name, value in named.items():
        values[name] = value.replace(CLUSTER_KEY_REFERENCE, keyed) if isinstance(value, str) \
            else [v.replace(CLUSTER_KEY_REFERENCE, keyed) for v in value]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def to_dict(config: Any) -> Dict[str, Any]:
    """`config` as JSON-ready data that `from_dict(type(config), ...)` reads back."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)
            if f.init}


# ---- the command line ---------------------------------------------------------------------

def read_config_text(text: str, role: str = "process") -> Dict[str, Any]:
    """The JSON object `--config` gives: inline JSON, or a file's path (see the contract)."""
    stripped = text.strip()
    source = "--config"
    if not stripped.startswith(("{", "[")):         # not JSON written inline: a path
        path = stripped[1:] if stripped.startswith("@") else stripped
        source = f"--config file {path}"
        try:
            with open(path, encoding="utf-8") as f:
                stripped = f.read()
        except OSError as e:
            raise ConfigError(role, None, f"cannot read {source}: {e.strerror or e}") from None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as e:
        raise ConfigError(role, None, f"{source} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(role, None, f"{source} must hold a JSON object, got "
                          f"{type(data).__name__}")
    return data


def _optional_inner(hint: Any) -> Tuple[Any, bool]:
    if typing.get_origin(hint) is typing.Union and type(None) in typing.get_args(hint):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True
    return hint, False


def _is_str_list(hint: Any) -> bool:
    return typing.get_origin(hint) in (list, Sequence, typing.Sequence) \
        and typing.get_args(hint)[:1] == (str,)


def _flag_type(hint: Any, name: str):
    inner, optional = _optional_inner(hint)

    def convert(text: str) -> Any:
        if optional and inner is str and text == "":
            return None
        if optional and inner is not str and text.strip().lower() in ("none", "null"):
            return None
        try:
            if inner is int:
                return int(text)
            if inner is float:
                return float(text)
            if inner is str:
                return text
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{name}: expected {_type_name(inner)}, got {text!r}") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text          # a bare word: a string (e.g. --write-quorum all)
    convert.__name__ = _type_name(inner)
    return convert


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not _MISSING:
        value = f.default
    elif f.default_factory is not _MISSING:      # type: ignore[misc]
        value = f.default_factory()              # type: ignore[misc]
    else:
        return " (required)"
    if value is None or value == [] or value == {}:
        return ""
    return f" (default: {json.dumps(_plain(value))})"


def add_config_arguments(parser: argparse.ArgumentParser, cls: type,
                         exclude: Sequence[str] = ()) -> None:
    """`--config` and one override flag per field of `cls` (see the module contract)."""
    parser.add_argument("--config", metavar="PATH|JSON", default=None, help=CONFIG_HELP)
    group = parser.add_argument_group(f"{role_of(cls)} configuration (overrides --config)")
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.name in exclude:
            continue
        flag = "--" + f.name.replace("_", "-")
        text = (f.metadata.get("help") or f.name) + _default_text(f)
        hint = hints[f.name]
        inner, optional = _optional_inner(hint)
        if inner is bool:
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=text)
        elif _is_str_list(hint):
            group.add_argument(flag, dest=f.name, action="append", default=argparse.SUPPRESS,
                               metavar="A[,B...]", help=text + "; repeat or separate by commas")
        else:
            metavar = {int: "N", float: "X", str: "TEXT"}.get(inner, "JSON")
            group.add_argument(flag, dest=f.name, type=_flag_type(hint, flag[2:]),
                               default=argparse.SUPPRESS, metavar=metavar,
                               help=text + (" ('none' for none)" if optional and inner in
                                            (int, float) else ""))


def role_parser(cls: type, prog: str, description: str) -> argparse.ArgumentParser:
    """The command-line parser of a process of `cls`'s role: `description` (its layout
    kept), then what the configuration is; `--config` and a flag per field."""
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"{description.rstrip()}\n\nThe configuration is a {cls.__name__} "
                    f"({cls.__module__}), from --config PATH|JSON; every option below "
                    f"overrides the field of its name.")
    add_config_arguments(parser, cls)
    return parser


def config_from_args(cls: Type[T], args: argparse.Namespace, exclude: Sequence[str] = ()) -> T:
    """The configuration `--config` gives, with every given flag over it (the contract)."""
    role = role_of(cls)
    data: Dict[str, Any] = {}
    if getattr(args, "config", None):
        data = read_config_text(args.config, role)
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.name in exclude or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if _is_str_list(hints[f.name]):
            value = [part.strip() for item in value for part in item.split(",") if part.strip()]
        elif isinstance(value, Mapping) and isinstance(data.get(f.name), Mapping):
            value = {**data[f.name], **value}
        data[f.name] = value
    return from_dict(cls, data, role=role)


def parse_config(parser: argparse.ArgumentParser, cls: Type[T],
                 argv: Optional[Sequence[str]] = None, exclude: Sequence[str] = ()
                 ) -> Tuple[T, argparse.Namespace]:
    """Parse `argv` and build the configuration; a bad one ends as a usage error (status 2)."""
    args = parser.parse_args(argv)
    try:
        return config_from_args(cls, args, exclude), args
    except ConfigError as e:
        parser.error(str(e))
        raise   # unreachable: parser.error exits


def positive(owner: str, config: Any, names: Iterable[str], *, allow_none: bool = False
             ) -> None:
    """Raise ValueError naming `owner.field` unless each named field is a number > 0 (or
    None when `allow_none`)."""
    for name in names:
        value = getattr(config, name)
        if value is None and allow_none:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{owner}.{name} must be a number > 0, got {value!r}")

