"""Kubernetes for the platform: manifests (`rbac/`, ...) and `controlplane`, a local
control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok) for tests.

The cluster manager itself is `anna_core.autoscale.kubernetes_manager`."""
