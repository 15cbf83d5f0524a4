"""An executor node brings its workers back: a function that kills its worker fails that
call, typed and at once, and the cluster keeps serving; a crash loop only slows restarts
down. Real processes."""
import time

import pytest

import cloudburst
from waiting import poll_until


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_worker_killed_by_its_function_comes_back_and_the_cluster_serves_on():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        c = cluster.client(timeout=20)
        c.register(lambda lib, x: x + 1, "inc")

        def die(lib):
            import os
            os._exit(3)

        c.register(die, "die")
        assert c.call("inc", 1).get(timeout=10) == 2
        start = time.monotonic()
        with pytest.raises(cloudburst.ExecutionError, match=r"worker node0\.w0-\w+ exited "
                                                            r"with code 3"):
            c.call("die", max_retries=0).get(timeout=10)     # not run again: fails at once
        assert time.monotonic() - start < 5          # told by the node, not by silence
        # the one worker is back under the same id: 20 calls succeed
        poll_until(lambda: c.executors(), 10, "the worker coming back")
        assert [c.call("inc", i).get(timeout=10) for i in range(20)] == list(range(1, 21))
        (worker,) = c.status().workers
        assert worker.worker_id == cluster.workers[0]["worker_id"] and worker.restarts == 1


def test_a_crash_loop_does_not_take_the_node_down():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as cluster:
        c = cluster.client(timeout=20)
        c.register(lambda lib, x: x * 2, "double")

        def die(lib):
            import os
            os._exit(1)

        c.register(die, "die")
        crashed = 0
        for _ in range(6):                 # each kills a worker (or finds none live)
            with pytest.raises((cloudburst.ExecutionError, cloudburst.NoResources)) as info:
                c.call("die", max_retries=0).get(timeout=10)
            crashed += isinstance(info.value, cloudburst.ExecutionError)
        assert crashed >= 2

        def serving():
            try:
                return c.call("double", 21).get(timeout=5) == 42
            except cloudburst.NoResources:
                return False

        poll_until(serving, 20, "the cluster serving again")
        restarts = poll_until(lambda: sum(w.restarts for w in c.status().workers), 10,
                              "the restarts being reported")
        assert restarts >= 1
        assert all(p.running() for p in cluster._nodes)


def test_workers_stop_promptly_on_sigterm():
    import os
    import signal
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1,
                                 restart_workers=False) as cluster:
        pid = cluster.workers[0]["pid"]
        os.kill(pid, signal.SIGTERM)

        def gone():
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:        # a zombie has exited too
                    return f.read().split()[2] == "Z"
            except (ProcessLookupError, FileNotFoundError):
                return True

        poll_until(gone, 3, "the worker exiting after SIGTERM")   # every socket closed
