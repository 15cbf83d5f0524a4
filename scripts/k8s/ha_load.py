"""The load of the real-cluster tier's failover steps (scripts/k8s/real_ha.py), run in a pod
of the platform's image, as a user's client in the cluster runs: it is given every
scheduler's stable name (SCHEDULERS, keyed with the cluster's public key) and reaches the KVS
through the stable names the schedulers report.

It keeps WINDOW calls in flight, each of a function that writes a new key and reads it back
(so the executor's node cache asks routing where the key lives), and every 10th call also
puts and gets an object of its own (the client's KVS client asks routing too). It tags each
outcome with the phase named in PHASE_FILE (written by the test with `kubectl exec`), and
prints `HA-PROGRESS N` every 20 calls; when the phase is "stop" prints one line `HA-SUMMARY {json}`: per phase the calls that
returned the right value, their latencies, and every failure with its type and message.
Every wait has a deadline (CALL_TIMEOUT per call; DEADLINE for the whole run). The client's
own log (its failovers) goes to stderr with times; when a call finds no scheduler, what each
scheduler's name resolves to at that moment is printed (`HA-RESOLVE`). After the summary the
client stays open (for a look at its connections) until the phase is "exit", at most LINGER s.
A thread resolves every scheduler's and routing's name every DNS_EVERY s and prints
`HA-DNS {name: seconds}` when a lookup took longer than DNS_SLOW s (ZeroMQ resolves a name in
its I/O thread, so a slow lookup stalls every connection of the process).
"""
import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from urllib.parse import urlsplit

from cloudburst import AuthConfig, Client
from cloudburst.futures import SchedulerUnavailable
from runtime.auth import CLIENT_PREFIX, CLUSTER, KeyPair, format_address

KEYS = os.environ.get("CLIENT_KEY_DIR", "/client-keys")
PHASE_FILE = os.environ.get("PHASE_FILE", "/tmp/phase")
WINDOW = int(os.environ.get("WINDOW", "4"))
CALL_TIMEOUT = float(os.environ.get("CALL_TIMEOUT", "30"))
DEADLINE = time.monotonic() + float(os.environ.get("DEADLINE", "900"))
LINGER = float(os.environ.get("LINGER", "600"))
DNS_EVERY = float(os.environ.get("DNS_EVERY", "0.5"))
DNS_SLOW = float(os.environ.get("DNS_SLOW", "0.5"))


def watch_dns(addresses, stop: threading.Event) -> None:
    """Print `HA-DNS` for every lookup of `addresses`' hosts slower than DNS_SLOW."""
    hosts = sorted({urlsplit(a.split("#", 1)[0]).hostname for a in addresses})
    while not stop.wait(DNS_EVERY):
        for host in hosts:
            t = time.monotonic()
            try:
                socket.getaddrinfo(host, None)
                what = "ok"
            except OSError as e:
                what = f"{type(e).__name__}: {e}"
            took = time.monotonic() - t
            if took > DNS_SLOW:
                print(f"HA-DNS {time.time():.3f} {host} took {took:.2f} s ({what})", flush=True)


def resolve_all(addresses) -> dict:
    """What each address's host resolves to now (or the error), for the log."""
    out = {}
    for a in addresses:
        host = urlsplit(a.split("#", 1)[0]).hostname
        try:
            out[host] = sorted({i[4][0] for i in socket.getaddrinfo(host, None, socket.AF_INET)})
        except OSError as e:
            out[host] = f"{type(e).__name__}: {e}"
    return out


def phase() -> str:
    try:
        with open(PHASE_FILE) as f:
            return f.read().strip() or "warm"
    except FileNotFoundError:
        return "warm"


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    public = KeyPair.load(os.path.join(KEYS, CLUSTER + ".key")).public
    schedulers = [format_address(a.strip(), public)
                  for a in os.environ["SCHEDULERS"].split(",") if a.strip()]
    client = Client(schedulers, ip=os.environ["POD_IP"], timeout=CALL_TIMEOUT,
                    auth=AuthConfig(KEYS, CLIENT_PREFIX + os.environ["CLIENT_NAME"]))

    def work(lib, x):
        lib.put(f"ha/{x}", x)
        return lib.get(f"ha/{x}") * 2

    client.register(work, "ha_work")
    stop_dns = threading.Event()
    threading.Thread(target=watch_dns, args=(schedulers + os.environ.get("ANNA_ROUTING", "")
                                             .split(","), stop_dns),
                     daemon=True, name="dns-watch").start()
    print("HA-LOAD READY", json.dumps({"schedulers": schedulers, "kvs": client.kvs_address}),
          flush=True)
    stats = {}
    n = 0
    window = []

    def record(tag, ok, latency, error=None):
        s = stats.setdefault(tag, {"ok": 0, "latencies": [], "failures": []})
        if ok:
            s["ok"] += 1
            s["latencies"].append(round(latency, 4))
        else:
            s["failures"].append(error)

    while time.monotonic() < DEADLINE:
        tag = phase()
        if tag == "stop":
            break
        while len(window) < WINDOW:
            n += 1
            try:
                window.append((n, tag, time.monotonic(), client.call("ha_work", n)))
            except Exception as e:  # noqa: BLE001 - a call that could not be sent: recorded
                if isinstance(e, SchedulerUnavailable):
                    print(f"HA-RESOLVE {time.time():.3f} {json.dumps(resolve_all(schedulers))}",
                          flush=True)
                record(tag, False, 0, {"call": n, "type": type(e).__name__,
                                       "message": str(e)[:300], "at": time.time()})
            if n % 10 == 0:
                t = time.monotonic()
                try:
                    client.put(f"ha-object/{n}", n)
                    got = client.get(f"ha-object/{n}")
                    record(tag + "/objects", got == n, time.monotonic() - t,
                           None if got == n else {"type": "WrongValue", "message": repr(got)})
                except Exception as e:  # noqa: BLE001 - recorded
                    record(tag + "/objects", False, 0, {"type": type(e).__name__,
                                                        "message": str(e)[:300],
                                                        "at": time.time()})
        i, ctag, sent, future = window.pop(0)
        if i % 20 == 0:     # progress, for the test to wait on
            print(f"HA-PROGRESS {i}", flush=True)
        try:
            value = future.get(timeout=CALL_TIMEOUT)
            ok = value == 2 * i
            record(ctag, ok, time.monotonic() - sent,
                   None if ok else {"call": i, "type": "WrongValue", "message": repr(value)})
        except SchedulerUnavailable as e:
            record(ctag, False, 0, {"call": i, "type": "SchedulerUnavailable",
                                    "scheduler": future.scheduler, "message": str(e)[:300],
                                    "at": time.time()})
        except Exception as e:  # noqa: BLE001 - recorded
            record(ctag, False, 0, {"call": i, "type": type(e).__name__,
                                    "message": str(e)[:300], "at": time.time()})
    for _, ctag, sent, future in window:        # the last ones, to the end
        try:
            future.get(timeout=CALL_TIMEOUT)
            record(ctag, True, time.monotonic() - sent)
        except Exception as e:  # noqa: BLE001 - recorded
            record(ctag, False, 0, {"type": type(e).__name__, "message": str(e)[:300]})
    summary = {}
    for tag, s in stats.items():
        lat = sorted(s["latencies"])
        summary[tag] = {"ok": s["ok"], "failed": len(s["failures"]),
                        "failures": s["failures"][:20],
                        "p50": lat[len(lat) // 2] if lat else None,
                        "max": lat[-1] if lat else None}
    print("HA-SUMMARY " + json.dumps(summary), flush=True)
    stop_dns.set()
    linger_until = time.monotonic() + LINGER
    while phase() != "exit" and time.monotonic() < linger_until:
        time.sleep(0.5)
    client.close()


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        print("HA-SUMMARY " + json.dumps({"error": traceback.format_exc()[-2000:]}),
              flush=True)
        sys.exit(1)
