"""Confinement of code the engine does not trust: the trial-load sandbox and the kernel restrictions it applies."""
