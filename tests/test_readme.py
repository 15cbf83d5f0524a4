"""The Python snippets of the README and of docs/*.md run as written, each in a namespace of
its own (the docs' snippets in a fresh working directory, since some write files there; a
docs snippet that starts an autoscaling platform cluster runs in the slow tier).

Every ```python block of README.md is self-contained: it imports what it uses and starts the
cluster it needs (`with cloudburst.LocalCluster(...) as cluster:`). To keep this fast, snippets
that ask for the same cluster (the same arguments) share one real `LocalCluster`, started the
first time it is asked for and stopped when the module's tests end: `LocalCluster` is
replaced, for the snippets only, by a stand-in that checks the arguments against the real
signature and hands out the shared cluster. Nothing else is replaced: every call goes to real
processes.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import os
import pathlib
import re
from typing import Any, Dict, List, Tuple

import pytest

import anna_core
import cloudburst

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = sorted(pathlib.Path(ROOT, "docs").glob("*.md"))


def python_blocks(text: str) -> List[Tuple[int, str]]:
    """(first line number, code) of every ```python block of `text`."""
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 2, m.group(1)))
    return out


BLOCKS = python_blocks(open(README, encoding="utf-8").read())
DOC_BLOCKS = [(f"docs/{doc.name}", line, code) for doc in DOCS
              for line, code in python_blocks(doc.read_text(encoding="utf-8"))]


class _Shared:
    """A started cluster handed to every snippet that asks for the same arguments; `with`
    and `stop()` leave it running (the module's fixture stops it)."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def __enter__(self) -> "_Shared":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def start(self) -> "_Shared":
        return self

    def stop(self) -> None:
        pass


class _Pool:
    """Real clusters, one per distinct set of arguments, started on first use."""

    def __init__(self) -> None:
        self.clusters: Dict[Tuple[str, str], Any] = {}
        self.real_cb = cloudburst.LocalCluster
        self.real_anna = anna_core.LocalCluster

    def factory(self, kind: str, real: Any):
        def make(*args: Any, **kwargs: Any) -> _Shared:
            inspect.signature(real).bind(*args, **kwargs)   # a TypeError as the real one gives
            key = (kind, repr((args, sorted(kwargs.items()))))
            if key not in self.clusters:
                cluster = real(*args, **kwargs)
                cluster.start()
                self.clusters[key] = cluster
            return _Shared(self.clusters[key])
        return make

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        self.clusters.clear()


@pytest.fixture(scope="module")
def pool():
    p = _Pool()
    yield p
    p.stop()


def test_readme_has_snippets():
    # the quick start, and one for each topic a newcomer reads about
    assert len(BLOCKS) >= 6, BLOCKS


def _run(pool: _Pool, monkeypatch: Any, where: str, code: str) -> None:
    monkeypatch.setattr(cloudburst, "LocalCluster", pool.factory("cloudburst", pool.real_cb))
    monkeypatch.setattr(anna_core, "LocalCluster", pool.factory("anna", pool.real_anna))
    namespace: Dict[str, Any] = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, where, "exec"), namespace)


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_snippet_runs(pool, monkeypatch, line, code):
    _run(pool, monkeypatch, f"README.md:{line}", code)


def test_the_docs_have_snippets():
    assert {doc for doc, _, _ in DOC_BLOCKS} >= {"docs/KVS.md", "docs/OPERATIONS.md"}


def _doc_param(doc: str, line: int, code: str) -> Any:
    # a snippet starting an autoscaling platform cluster takes 10 s or more: the slow tier
    marks = [pytest.mark.slow] if "cloudburst.LocalCluster(" in code and "autoscale=True" in code \
        else []
    return pytest.param(doc, line, code, id=f"{doc}:{line}", marks=marks)


@pytest.mark.parametrize("doc,line,code", [_doc_param(*b) for b in DOC_BLOCKS])
def test_docs_snippet_runs(pool, monkeypatch, tmp_path, doc, line, code):
    monkeypatch.chdir(tmp_path)        # a snippet may write files (a key directory)
    _run(pool, monkeypatch, f"{doc}:{line}", code)


def test_the_readme_test_command_is_what_ci_runs():
    """The README's second command and CI's test line (.ci/run) are the same command."""
    root = pathlib.Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    block = readme.split("# 2. run every test", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    command = [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    ci = [l for l in (root / ".ci" / "run").read_text().splitlines() if l.startswith("scripts/test")]
    assert command == ci == ["scripts/test.sh && scripts/test_slow.sh"]
