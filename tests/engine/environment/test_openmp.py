"""OMP_WAIT_POLICY: the server's entry points make it PASSIVE before torch loads, unless the operator chose one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.environment.openmp import prefer_passive_wait

ROOT = Path(__file__).resolve().parents[3]
PROBE = "import os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


def test_it_sets_passive_only_where_unset():
    unset: dict[str, str] = {}
    assert prefer_passive_wait(unset) == "PASSIVE" and unset == {"OMP_WAIT_POLICY": "PASSIVE"}
    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert prefer_passive_wait(chosen) == "ACTIVE" and chosen == {"OMP_WAIT_POLICY": "ACTIVE"}


@pytest.mark.parametrize("chosen", [None, "ACTIVE"])
def test_it_is_in_force_in_manage_py_before_torch_loads(chosen: str | None):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if chosen:
        env["OMP_WAIT_POLICY"] = chosen
    # manage.main is what `python manage.py` runs; here only its first lines, before Django's command
    code = (
        "import runpy, sys, unittest.mock as m; "
        "sys.argv = ['manage.py', 'help']; "
        "m.patch('django.core.management.execute_from_command_line', lambda argv: None).start(); "
        f"runpy.run_path('manage.py', run_name='__main__'); {PROBE}"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [chosen or "PASSIVE", "False"]


def test_it_is_reachable_through_engine_api_before_torch_loads():
    """console/asgi.py takes it from engine.api (the console's one door), so that import must not load torch."""
    code = f"from engine.api import prefer_passive_wait; prefer_passive_wait(); {PROBE}"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["PASSIVE", "False"]
