"""Kubernetes for the platform: every piece of code that speaks to Kubernetes, and the
manifests (`kustomization.yaml`, `base/`, `rbac/`, read by kustomize and shipped as package
data).

- `errors`: `KubernetesError` and its tree (one per failure kind), `WaitTimeout`, `RoleRefused`.
- `api`: `connect`, the one way to build an API client; the API options of a scaling process.
- `names`: the workloads' names.
- `pod_state` (pure) and `pods`: nodes as the pods of a Deployment; `pool`: the node managers
  over them (Anna's tiers, the executor nodes).
- `manifests`, `status` (pure), `deploy` and `cli`: `cloudburst k8s deploy|status|scale|delete`.
- `entrypoint`: `python -m k8s.entrypoint ROLE`, the image's command in every pod.

Nothing outside this package (and the tests) imports the `kubernetes` client. See README.md
in this folder and docs/ARCHITECTURE.md (the control plane)."""
