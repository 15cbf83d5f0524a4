"""What functions print: captured per call, written to the worker's log, bounded.

Contract:
- `CallOutput(log_stream, limit)` replaces a worker's `sys.stdout` and `sys.stderr` (one
  object per stream, sharing one `Capture`). Writing never blocks on a reader: the text goes
  to the worker's log file (the launcher points stdout and stderr there), each line prefixed
  with the call id and function name, and into the running call's buffer.
- `Capture.begin(call_id, function)` starts a call's buffer; `end()` returns what the call
  printed, at most `limit` characters: past the limit the oldest text is dropped and the
  text starts with a note saying how much. Output written outside a call (the worker's own
  messages) goes to the log only.
- Thread-safe: a function's own threads may print while it runs.
- `UpstreamLogs` holds what upstream functions printed until the function they feed runs,
  for at most `max_calls` calls (the oldest call's is dropped first).
- `section(function, text)` labels one function's output; `join_logs(sections, limit)` joins
  a DAG's sections (upstream first) and keeps the total under `limit` the same way.
"""
from __future__ import annotations

import threading
from typing import IO, Dict, List, Optional, Tuple

__all__ = ["Capture", "CallOutput", "UpstreamLogs", "section", "join_logs", "bounded",
           "DEFAULT_LIMIT"]

DEFAULT_LIMIT = 64 * 1024


def bounded(text: str, limit: int) -> str:
    """`text`, or its last `limit` characters after a note of how many were dropped."""
    if len(text) <= limit:
        return text
    dropped = len(text) - limit
    return f"[... {dropped} earlier characters dropped]\n" + text[dropped:]


class Capture:
    """The running call's output buffer, shared by the stdout and stderr replacements."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._call: Optional[Tuple[str, str]] = None
        self._parts: List[str] = []
        self._size = 0
        self._dropped = 0

    def begin(self, call_id: str, function: str) -> None:
        with self._lock:
            self._call = (call_id, function)
            self._parts, self._size, self._dropped = [], 0, 0

    def end(self) -> str:
        """What the call printed (bounded); the capture then belongs to no call."""
        with self._lock:
            text = "".join(self._parts)
            dropped = self._dropped
            self._call, self._parts, self._size, self._dropped = None, [], 0, 0
        if dropped:
            text = f"[... {dropped} earlier characters dropped]\n" + text
        return text

    def prefix(self) -> str:
        call = self._call
        return f"call {call[0]} {call[1]}: " if call else ""

    def add(self, text: str) -> None:
        with self._lock:
            if self._call is None:
                return
            self._parts.append(text)
            self._size += len(text)
            while self._size > self.limit and self._parts:
                # drop whole parts from the front, then trim the first one to fit
                first = self._parts[0]
                excess = self._size - self.limit
                if len(first) <= excess:
                    self._parts.pop(0)
                    self._size -= len(first)
                    self._dropped += len(first)
                else:
                    self._parts[0] = first[excess:]
                    self._size -= excess
                    self._dropped += excess


class CallOutput:
    """A text stream for `sys.stdout` / `sys.stderr`; see the module contract."""

    def __init__(self, log_stream: IO[str], capture: Capture) -> None:
        self._log = log_stream
        self.capture = capture
        self._lock = threading.Lock()
        self._at_line_start = True
        self.encoding = getattr(log_stream, "encoding", "utf-8")

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.capture.add(text)
        prefix = self.capture.prefix()
        with self._lock:
            out = []
            for line in text.splitlines(keepends=True):
                if self._at_line_start and prefix:
                    out.append(prefix)
                out.append(line)
                self._at_line_start = line.endswith("\n")
            try:
                self._log.write("".join(out))
                self._log.flush()
            except (OSError, ValueError):
                pass  # the log is gone (full disk, closed): printing must not fail the call
        return len(text)

    def flush(self) -> None:
        try:
            self._log.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._log.fileno()


def section(function: str, text: str) -> str:
    """One function's output as a `[function]` section ("" when it printed nothing)."""
    if not text:
        return ""
    return f"[{function}]\n{text}" + ("" if text.endswith("\n") else "\n")


def join_logs(parts: List[str], limit: int = DEFAULT_LIMIT) -> str:
    """Sections of a DAG's functions, upstream first, bounded to `limit` characters."""
    return bounded("".join(parts), limit)


class UpstreamLogs:
    """Upstream output per call and target function, bounded (see the module contract)."""

    def __init__(self, max_calls: int = 1024) -> None:
        self.max_calls = max_calls
        self._calls: Dict[str, Dict[str, List[str]]] = {}

    def add(self, call_id: str, target: str, text: str) -> None:
        if call_id not in self._calls and len(self._calls) >= self.max_calls:
            self._calls.pop(next(iter(self._calls)))
        self._calls.setdefault(call_id, {}).setdefault(target, []).append(text)

    def take(self, call_id: str, function: str) -> List[str]:
        """What reached `function` of `call_id` (forgotten once taken)."""
        targets = self._calls.get(call_id)
        if not targets:
            return []
        texts = targets.pop(function, [])
        if not targets:
            del self._calls[call_id]
        return texts

    def drop(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
