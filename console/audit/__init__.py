"""The audit app: who did what to which model, version or account, and when."""
