"""The platform's Kubernetes objects, rendered from the manifests shipped with the package.

Contract:
- **One truth.** The objects are those of `k8s/kustomization.yaml` (the same files `kubectl
  apply -k k8s/` applies), read from the installed `k8s` package (`importlib.resources`; the
  YAML files are package data, see setup.py). Whatever files a kustomization's `resources:`
  lists are rendered, recursively through directories that hold a `kustomization.yaml`; no
  object or file name is hard-coded here.
- **The kustomize subset the repository uses**: `resources:` (files and directories),
  `namespace:` (every namespaced object's namespace, the Namespace object's name and the
  namespace of RoleBinding subjects that are ServiceAccounts) and `images:` (`name` matched
  against container images without their tag or digest, replaced by `newName`/`newTag`/
  `digest`). Anything else in a kustomization raises `ManifestError` rather than being
  silently ignored.
- `render(...)` is pure (files in, dicts out); overrides (namespace, image, replica counts)
  are applied like kustomize's `namespace:` / `images:` / `replicas:` would.
"""
from __future__ import annotations

import copy
import importlib.resources
from typing import Any, Dict, Iterable, List, Mapping, Optional

import yaml

__all__ = ["ManifestError", "package_root", "render", "image_name", "apply_order",
           "MANAGED_BY"]

# Label put on every object `cloudburst k8s deploy` applies, so they can be found again.
MANAGED_BY = {"app.kubernetes.io/managed-by": "cloudburst-k8s"}
# Keys of a kustomization this renderer understands.
_KNOWN = {"apiVersion", "kind", "resources", "namespace", "images"}
# Kinds that are not namespaced among those the manifests may hold.
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                   "PriorityClass", "StorageClass", "PersistentVolume"}
# Creation order: what others refer to first (the namespace, accounts, configuration).
_ORDER = ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
          "RoleBinding", "ConfigMap", "Secret", "StorageClass", "PersistentVolumeClaim",
          "Service"]


class ManifestError(ValueError):
    """The manifests cannot be read or use a kustomize feature this renderer does not
    implement; the message names the file."""


def package_root() -> Any:
    """The directory of the manifests shipped with the package (a Traversable: `k8s/`)."""
    return importlib.resources.files("k8s")


def image_name(image: str) -> str:
    """`image` without its tag or digest (`reg:5000/a/b:tag@sha256:..` -> `reg:5000/a/b`)."""
    image = image.split("@", 1)[0]
    slash = image.rfind("/")
    colon = image.rfind(":")
    return image[:colon] if colon > slash else image


def _read_kustomization(directory: Any) -> Dict[str, Any]:
    path = directory / "kustomization.yaml"
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ManifestError(f"cannot read {path}: {e}") from None
    unknown = set(data) - _KNOWN
    if unknown:
        raise ManifestError(f"{path}: kustomize fields {sorted(unknown)} are not supported by "
                            f"`cloudburst k8s` (supported: {sorted(_KNOWN)})")
    return data


def _load(directory: Any) -> tuple:
    """(objects, image rules) of the kustomization in `directory`, without namespace."""
    k = _read_kustomization(directory)
    objects: List[Dict[str, Any]] = []
    images: List[Dict[str, Any]] = []
    for resource in k.get("resources") or []:
        path = directory / resource
        if path.is_dir():
            sub_objects, sub_images = _load(path)
            objects += sub_objects
            images += sub_images
            sub_ns = _read_kustomization(path).get("namespace")
            if sub_ns:
                _set_namespace(sub_objects, sub_ns)
        else:
            try:
                objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
            except (OSError, yaml.YAMLError) as e:
                raise ManifestError(f"cannot read {path}: {e}") from None
    for rule in k.get("images") or []:
        if not isinstance(rule, dict) or "name" not in rule:
            raise ManifestError(f"{directory}/kustomization.yaml: an `images:` entry needs a "
                                f"name: {rule!r}")
        images.append(rule)
    if k.get("namespace"):
        _set_namespace(objects, k["namespace"])
    _apply_images(objects, images)
    return objects, images


def _set_namespace(objects: Iterable[Dict[str, Any]], namespace: str) -> None:
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if obj.get("kind") == "Namespace":
            meta["name"] = namespace
        elif obj.get("kind") not in _CLUSTER_SCOPED:
            meta["namespace"] = namespace
        if obj.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
            for subject in obj.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace


def _containers(obj: Dict[str, Any]) -> List[Dict[str, Any]]:
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


def _apply_images(objects: Iterable[Dict[str, Any]], rules: List[Dict[str, Any]]) -> None:
    for obj in objects:
        for c in _containers(obj):
            for rule in rules:
                if "image" in c and image_name(c["image"]) == image_name(rule["name"]):
                    c["image"] = _rewrite(c["image"], rule)


def _rewrite(image: str, rule: Mapping[str, Any]) -> str:
    name = rule.get("newName") or image_name(image)
    if rule.get("digest"):
        return f"{name}@{rule['digest']}"
    if rule.get("newTag"):
        return f"{name}:{rule['newTag']}"
    rest = image[len(image_name(image)):]
    return name + rest


def render(root: Any = None, *, namespace: Optional[str] = None, image: Optional[str] = None,
           replicas: Optional[Mapping[str, int]] = None) -> List[Dict[str, Any]]:
    """The objects of `root/kustomization.yaml` (default: the package's manifests).

    Args:
        root: a directory (Path or Traversable) holding a kustomization.yaml.
        namespace: put everything in this namespace (like kustomize's `namespace:`).
        image: replace the platform image (every container image the kustomizations'
            `images:` entries name) with this one, e.g. `registry.example/cloudburst:1.2`.
        replicas: Deployment or StatefulSet name -> replica count.
    Raises ManifestError (a file, or a field it does not support) and ValueError (an
    override names no object)."""
    objects, rules = _load(root if root is not None else package_root())
    objects = copy.deepcopy(objects)
    if namespace:
        _set_namespace(objects, namespace)
    if image:
        if not rules:
            raise ManifestError("the kustomization lists no `images:`, so the platform image "
                                "to replace with --image is unknown")
        platform = {image_name(r["name"]) for r in rules} | \
            {image_name(_rewrite(r["name"], r)) for r in rules}
        for obj in objects:
            for c in _containers(obj):
                if image_name(c.get("image", "")) in platform:
                    c["image"] = image
    deployments = {o["metadata"]["name"]: o for o in objects
                   if o.get("kind") in ("Deployment", "StatefulSet")}
    for name, count in (replicas or {}).items():
        if name not in deployments:
            raise ValueError(f"no Deployment or StatefulSet {name!r} in the manifests "
                             f"(they have {sorted(deployments)})")
        deployments[name]["spec"]["replicas"] = int(count)
    for obj in objects:
        obj["metadata"].setdefault("labels", {}).update(MANAGED_BY)
    return objects


def apply_order(objects: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """`objects` in creation order: the namespace, accounts and RBAC, configuration, Services,
    then everything else (Deployments) in their file order."""
    def rank(obj: Dict[str, Any]) -> int:
        kind = obj.get("kind")
        return _ORDER.index(kind) if kind in _ORDER else len(_ORDER)
    return sorted(objects, key=rank)   # stable: file order within a kind
