"""Traffic across a model's versions: the policies (canary, shadow, rollback guard) and each request's route."""
