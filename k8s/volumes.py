"""Local volumes for the disk tier's claims, on clusters without a storage provisioner.

Contract:
- The disk StatefulSet's volumeClaimTemplates ask for the storage class `LOCAL_CLASS`
  (`cloudburst-local`, no provisioner; k8s/base/anna-disk.yaml). For each ordinal the tier
  can reach, `local_volumes(namespace, statefulset, ordinals, root)` returns one
  PersistentVolume per claim template of that class: a hostPath directory
  `root/NAMESPACE/CLAIM` (created by the kubelet when first mounted), of the template's size
  and access modes, reserved for exactly that claim (`claimRef` NAMESPACE/CLAIM, where CLAIM
  is `TEMPLATE-STATEFULSET-ORDINAL`, the name the StatefulSet gives it), reclaim policy
  Retain, labelled as ours. So ordinal N always gets back the volume it had, and a deleted
  claim's data stays on the node until someone deletes the volume.
- Templates of another class (a cluster with a provisioner) get nothing here.
- Pure: objects in, objects out. The caller applies them (`cloudburst k8s deploy`, the
  real-cluster tests); volumes that already exist are left as they are.
- Limits: a hostPath volume lives on one node's disk. On a multi-node cluster the pod must
  come back on the same node to find its data: use a real storage class there.
"""
from __future__ import annotations

import posixpath
from typing import Any, Dict, Iterable, List, Mapping

from .manifests import MANAGED_BY

__all__ = ["LOCAL_CLASS", "claim_name", "local_volumes", "volume_name"]

LOCAL_CLASS = "cloudburst-local"


def claim_name(template: str, statefulset: str, ordinal: int) -> str:
    """The claim a StatefulSet makes for `template` and pod `ordinal`."""
    return f"{template}-{statefulset}-{ordinal}"


def volume_name(namespace: str, claim: str) -> str:
    """The PersistentVolume reserved for `claim` (volumes are cluster-wide: the namespace is
    part of the name)."""
    return f"cloudburst-{namespace}-{claim}"


def local_volumes(namespace: str, statefulset: Mapping[str, Any], ordinals: Iterable[int],
                  root: str) -> List[Dict[str, Any]]:
    """One local PersistentVolume per (ordinal, claim template of `LOCAL_CLASS`)."""
    if not posixpath.isabs(root):
        raise ValueError(f"the local volumes' root must be an absolute path, not {root!r}")
    name = statefulset["metadata"]["name"]
    labels = dict(MANAGED_BY, **{"app.kubernetes.io/name": name})
    out: List[Dict[str, Any]] = []
    for ordinal in ordinals:
        if ordinal < 0:
            raise ValueError(f"ordinal {ordinal} of {name} is negative")
        for template in statefulset["spec"].get("volumeClaimTemplates", []):
            spec = template["spec"]
            if spec.get("storageClassName") != LOCAL_CLASS:
                continue
            claim = claim_name(template["metadata"]["name"], name, ordinal)
            out.append({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": volume_name(namespace, claim), "labels": dict(labels)},
                "spec": {
                    "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                    "accessModes": list(spec.get("accessModes", ["ReadWriteOnce"])),
                    "storageClassName": LOCAL_CLASS,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "volumeMode": "Filesystem",
                    "hostPath": {"path": posixpath.join(root, namespace, claim),
                                 "type": "DirectoryOrCreate"},
                    "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                 "namespace": namespace, "name": claim},
                },
            })
    return out
