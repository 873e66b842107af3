"""Infera benchmarks: ceilings, Infera and MLServer 1.7.1 measured in one run (`python -m bench`)."""

from engine.environment.openmp import prefer_passive_wait

# as manage.py does, before anything imports torch, for every side a bench starts from here: Infera, the peers'
# servers (they inherit the environment) and the direct ceilings in this process
prefer_passive_wait()
