"""`serve --memory-budget-mb` and `--gpu-memory-budget`: each in place of its variable, checked before anything
starts, handed on to the workers."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from console.hosting import workers
from console.management.commands.serve import memory_budget


def test_serve_refuses_a_bad_budget() -> None:
    with pytest.raises(CommandError, match="INFERA_GPU_MEMORY_BUDGET must be bytes or a fraction"):
        call_command("serve", "--gpu-memory-budget", "lots")
    with pytest.raises(CommandError, match="INFERA_MEMORY_BUDGET_MB"):
        call_command("serve", "--memory-budget-mb", "-5")


def test_the_flags_set_the_engines_budget(monkeypatch) -> None:
    monkeypatch.delenv("INFERA_MEMORY_BUDGET_MB", raising=False)
    monkeypatch.setenv("INFERA_GPU_MEMORY_BUDGET", "0.5")
    assert memory_budget({"memory_budget_mb": None, "gpu_memory_budget": None}) == {}
    budget = memory_budget({"memory_budget_mb": "500", "gpu_memory_budget": None})["memory"]
    assert (budget.host_bytes, budget.gpu_fraction) == (500 << 20, 0.5)  # the variable still counts when unflagged


def test_the_workers_get_the_budget(worker_commands, settings) -> None:
    given = {"server": "uvicorn", "no_access_log": False, "memory_budget_mb": "500", "gpu_memory_budget": "0.8"}
    workers.run_workers("127.0.0.1", 8000, 2, settings.INFERA, given)
    assert "--memory-budget-mb 500 --gpu-memory-budget 0.8" in " ".join(worker_commands[0])
