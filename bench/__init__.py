"""Infera benchmarks: ceilings, Infera and MLServer 1.7.1 measured in one run (`python -m bench`)."""
