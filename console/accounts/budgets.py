"""Token budgets of users and API tokens: read into the engine's `Budget`s, set by admins (pages and API), audited.

A caller's budgets travel on its Principal (`principal_for`), so the engine's BudgetGate checks them with no
database query on the request's path. Setting one announces a credential change for that user or token
(revocations.py): every replica drops its cached verdicts at once and the next request carries the new limits.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console.accounts import audit
from console.accounts.models import ApiToken, BudgetLimits, TokenBudget, UserBudget
from console.accounts.revocations import announce
from engine.api import Budget, BudgetGate, RedisCounters

LIMITS = BudgetLimits.LIMITS


def budgets_for(user: Any, token: ApiToken | None = None) -> tuple[Budget, ...]:
    """The engine's budgets of a user (and of the token it presented): those that set any limit."""
    found = []
    user_budget = UserBudget.objects.filter(user_id=user.pk).first()
    if user_budget is not None:
        found.append(Budget(f"user:{user.pk}", **user_budget.limits()))
    if token is not None:
        token_budget = TokenBudget.objects.filter(token_id=token.pk).first()
        if token_budget is not None:
            found.append(Budget(f"token:{token.pk}", **token_budget.limits()))
    return tuple(budget for budget in found if budget.limits_anything)


def limits_of(owner: Any) -> dict[str, int | None]:
    """A user's or a token's limits as set (all None when none is)."""
    budget = _stored(owner)
    return budget.limits() if budget is not None else dict.fromkeys(LIMITS)


def set_limits(actor: Any, owner: Any, limits: dict[str, int | None]) -> dict[str, int | None]:
    """Set a user's or a token's limits (the keys given; None clears one), audited and announced to every replica."""
    unknown = set(limits) - set(LIMITS)
    if unknown:
        raise ValueError(f"unknown budget limits: {', '.join(sorted(unknown))}")
    with transaction.atomic():
        budget = _stored(owner)
        if budget is None:
            budget = TokenBudget(token=owner) if isinstance(owner, ApiToken) else UserBudget(user=owner)
        for name, value in limits.items():
            setattr(budget, name, value)
        budget.full_clean()
        budget.save()
        if isinstance(owner, ApiToken):
            audit.record(actor, "token.budget", f"{owner.user.get_username()}/{owner.name}", **budget.limits())
            announce(token_id=owner.pk)
        else:
            audit.record(actor, "user.budget", owner.get_username(), **budget.limits())
            announce(user_id=owner.pk)
    return budget.limits()


def _stored(owner: Any) -> BudgetLimits | None:
    if isinstance(owner, ApiToken):
        return TokenBudget.objects.filter(token_id=owner.pk).first()
    return UserBudget.objects.filter(user_id=owner.pk).first()


def budget_gate(redis_url: str | None) -> BudgetGate:
    """The runtime's gate: its counters in Redis (REDIS_URL), shared by every replica, else in this process."""
    return BudgetGate(RedisCounters(redis_url) if redis_url else None)
