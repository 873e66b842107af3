"""Serving models: the `InferenceServer` facade, admission, loading, versions, instances and their statistics."""
