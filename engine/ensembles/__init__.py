"""Triton's ensembles: the plan of steps, the dispatcher running them, and the streams of decoupled steps."""
