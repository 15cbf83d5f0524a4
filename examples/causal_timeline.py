"""The dissertation's motivating anomaly (chapter 4), prevented by HydroCache.

    python examples/causal_timeline.py [--address ADDRESS [--key-dir DIR] [--client NAME]]

Alice bans Bob from her pictures, then posts a picture making fun of him: the post depends on
the new permissions (one causal DAG writes both, atomically). Bob's timeline is a DAG of two
functions that may run on different nodes: one checks the permissions, the other loads the
post. Under `consistency="causal"` the two reads form one causal snapshot, so Bob either
sees the old permissions and the old post, or the ban and the new post: never the new post
with the old permissions.
"""
from _common import connect

from cloudburst import Reference


def alice_posts(lib, permissions, post, text):
    # reading the keys first makes the new versions supersede the old ones (a blind write
    # would be concurrent with them, and the causal lattice would keep both as siblings)
    lib.put("alice/permissions", dict(permissions, bob=False))   # both writes commit together
    lib.put("alice/post", text)                                  # at the sink, atomically
    return "posted"


def check_permissions(lib, permissions):
    return permissions.get("bob", True)


def render(lib, post, allowed):
    return post if allowed else "(nothing to see)"


with connect(__doc__, executors_per_node=1, executor_nodes=2, colocate_chains=False) as client:
    client.put("alice/permissions", {"bob": True}, consistency="causal")
    client.put("alice/post", "holiday photos", consistency="causal")
    client.register(alice_posts, "alice_posts")
    client.register(check_permissions, "check_permissions")
    client.register(render, "render")
    client.register_dag("timeline", ["check_permissions", "render"],
                        [("check_permissions", "render")])

    def timeline():
        return client.call_dag("timeline", {"check_permissions": [Reference("alice/permissions")],
                                            "render": [Reference("alice/post")]},
                               consistency="causal").get(timeout=10)

    print("before:", timeline())
    client.call("alice_posts", Reference("alice/permissions"), Reference("alice/post"),
                "a picture making fun of Bob", consistency="causal").get(timeout=10)
    # caches refresh from Anna's pushes (once per gossip period): Bob may see the old state
    # for a moment, but never the new post without the ban
    import time
    deadline = time.monotonic() + 10
    seen = None
    while seen != "(nothing to see)" and time.monotonic() < deadline:
        seen = timeline()
        assert seen != "a picture making fun of Bob", "TCC violated"
    print("Bob sees:", seen)
