"""Tests of the cluster app: replicas, heartbeats, versions per replica."""
