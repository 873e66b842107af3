"""Ways to run Infera as many replicas: a local cluster (deploy/local.py), Kubernetes manifests and a Helm chart."""
