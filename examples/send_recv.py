"""Two running functions talking: the receiver publishes its id, the sender sends it bytes.

    python examples/send_recv.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
import time

from _common import connect

import cloudburst


def receiver(lib, key):
    lib.put(key, lib.getid())          # tell the world where to send
    return lib.recv(timeout=10)        # [(sender id, bytes), ...]


def sender(lib, key, text):
    dest = lib.get(key)
    lib.send(dest, text.encode())
    return lib.getid()


with connect(__doc__, executors_per_node=2) as client:
    client.register(receiver, "receiver")
    client.register(sender, "sender")
    inbox = client.call("receiver", "rx-id")
    deadline = time.monotonic() + 10
    while True:                        # wait until the receiver is running
        try:
            client.get("rx-id")
            break
        except cloudburst.ObjectNotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    who = client.call("sender", "rx-id", "hello from a function").get(timeout=10)
    for sender_id, payload in inbox.get(timeout=15):
        print(f"receiver got {payload!r} from {sender_id} (the sender said it is {who})")
