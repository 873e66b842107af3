"""The cluster app: the replicas serving one database, their heartbeats, and each version's state on each one."""
