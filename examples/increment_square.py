"""The `increment -> square` composition: a 2-function DAG; results flow worker to worker.

    python examples/increment_square.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
from _common import connect


def increment(lib, x):
    return x + 1


def square(lib, x):
    return x * x


with connect(__doc__) as client:
    client.register(increment, "increment")
    client.register(square, "square")
    client.register_dag("increment_square", ["increment", "square"], [("increment", "square")])
    print("increment(3) =", client.call("increment", 3).get(timeout=10))
    print("square(increment(3)) =", client.call_dag("increment_square", {"increment": [3]}).get(timeout=10))
    client.call_dag("increment_square", {"increment": [9]}, output_key="result").get(timeout=10)
    print("stored under 'result':", client.get("result"))
