"""OpenMP's wait policy for the server's process: PASSIVE unless the operator chose one, set before torch loads.

torch's CPU kernels run on OpenMP threads (libgomp), which by default spin for a while after each parallel region
waiting for the next. In a server that region is one matmul of a model step, and the cores they spin on are the ones
the event loop, the other models' instances and, on a small host, every other process need: on the 2-core machine
here, under load, one SmolLM2 decode step with torch's two threads took 1.6-4.1 s with the default or ACTIVE policy
and 55-135 ms with PASSIVE (threads sleep between regions). The policy is read once, when libgomp starts, so the
entry points (manage.py, console/asgi.py) apply it before anything imports torch.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

WAIT_POLICY = "OMP_WAIT_POLICY"


def prefer_passive_wait(environ: MutableMapping[str, str] | None = None) -> str:
    """OMP_WAIT_POLICY set to PASSIVE where it is unset; the policy in force returned."""
    environ = os.environ if environ is None else environ
    return environ.setdefault(WAIT_POLICY, "PASSIVE")
