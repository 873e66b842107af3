"""How the API shows replicas and each version's state on them (the registry's serializers include these)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from console.registry.cluster.states import ReplicaStates


class ReplicaStateSerializer(serializers.Serializer):
    """A version's state on one replica."""

    replica = serializers.CharField(help_text="INFERA_REPLICA_NAME of the serving process")
    state = serializers.CharField()
    error = serializers.CharField(help_text="why it failed there (FAILED only)")
    live = serializers.BooleanField(help_text="false: the replica stopped reporting (gone), so it is not counted")


class GoneReplicaSerializer(serializers.Serializer):
    name = serializers.CharField()
    last_seen = serializers.DateTimeField()


class ClusterSerializer(serializers.Serializer):
    """The replicas serving this database: those reporting, and those that stopped (gone)."""

    live = serializers.ListField(child=serializers.CharField(), help_text="names of the replicas reporting")
    gone = GoneReplicaSerializer(many=True, help_text="replicas that stopped reporting (kept an hour)")


def cluster_view(context: dict[str, Any]) -> ReplicaStates:
    """The cluster as this response shows it, read once per response."""
    view = context.get("cluster_view")
    if view is None:
        view = context["cluster_view"] = ReplicaStates.read()
    return view
