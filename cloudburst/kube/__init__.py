"""The platform on Kubernetes: `cloudburst k8s` (cli), the I/O (platform), the manifests
shipped with the package (manifests) and the pure reading of Deployments and pods (state)."""
