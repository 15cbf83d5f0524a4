"""Fan-out / fan-in: one source feeds two branches that run in parallel; the sink waits for both.

The sink receives its own arguments first, then its upstreams' results in the order the
connections were registered ("stats" before "scaled" here).

    python examples/fan_out_fan_in.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
from _common import connect

import cloudburst


def load(lib, n):
    return list(range(n))


def stats(lib, xs):
    return {"count": len(xs), "sum": sum(xs)}


def scaled(lib, factor, xs):   # own arguments first, then the upstream result
    return [x * factor for x in xs]


def report(lib, title, st, values):
    return f"{title}: {st['count']} values, sum {st['sum']}, scaled sum {sum(values)}"


with connect(__doc__) as client:
    for fn in (load, stats, scaled, report):
        client.register(fn, fn.__name__)
    client.register_dag("fan", ["load", "stats", "scaled", "report"],
                        [("load", "stats"), ("load", "scaled"),
                         ("stats", "report"), ("scaled", "report")])
    print(client.call_dag("fan", {"load": [10], "scaled": [3], "report": ["demo"]}).get(timeout=10))
    # a Reference is resolved on the executor, through its node cache
    client.put("numbers", list(range(100)))
    client.register(lambda lib, xs: sum(xs), "total")
    print("sum of 'numbers':", client.call("total", cloudburst.Reference("numbers")).get(timeout=10))
