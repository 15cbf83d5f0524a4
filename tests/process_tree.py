"""The processes of a test's process tree, for fault tests that stop or kill a whole tree
(executor workers and some children start their own sessions, so a process group does not
reach them)."""
import os
from typing import Dict, List


def descendants(root: int) -> List[int]:
    """`root` and every process below it, parents before children."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out
