"""The accounts app's data: API tokens, the token budgets of users and tokens, and the tokens they used a minute at a
time (users, groups and permissions are Django's own)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models, transaction
from django.utils import timezone


class ApiToken(models.Model):
    """A named API key of one user, stored as a SHA-256 hash; the key itself is shown once, at creation."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # the first characters of the key, stored in clear so a presented key finds its row without a hash scan
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(default=timezone.now)
    expires = models.DateTimeField(null=True, blank=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.user})"

    @property
    def revoked(self) -> bool:
        """True once revoked; a revoked token never works again."""
        return self.revoked_at is not None

    def is_expired(self, now: datetime | None = None) -> bool:
        """True when the token has an expiry that has passed."""
        return self.expires is not None and self.expires <= (now or timezone.now())

    @property
    def status(self) -> str:
        """active, revoked or expired, as pages show it."""
        if self.revoked:
            return "revoked"
        if self.is_expired():
            return "expired"
        return "active"

    def revoke(self, actor: Any = None) -> None:
        """Revoke the token now (a second revoke keeps the first time); audited as `actor`'s (else its owner's)."""
        from console.accounts import audit

        if self.revoked_at is None:
            with transaction.atomic():
                self.revoked_at = timezone.now()
                self.save(update_fields=["revoked_at"])
                audit.record(
                    actor or self.user, "token.revoke", f"{self.user.get_username()}/{self.name}", prefix=self.prefix
                )


class BudgetLimits(models.Model):
    """Token budgets (engine/llm/budgets.py): each limit unset (null) or a positive whole number."""

    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    concurrent_streams = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    max_tokens = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])

    class Meta:
        abstract = True

    LIMITS = ("tokens_per_minute", "concurrent_streams", "max_tokens")

    def limits(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in self.LIMITS}


class UserBudget(BudgetLimits):
    """A user's token budget, across all of the user's tokens."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget")


class TokenBudget(BudgetLimits):
    """One API token's token budget (its user's applies too)."""

    token = models.OneToOneField(ApiToken, on_delete=models.CASCADE, related_name="budget")


class UsageMinute(models.Model):
    """The tokens one caller used in one minute, added up over every replica (console/accounts/usage.py writes it).

    The caller is kept by id and name, not by foreign key, so its usage still counts after its account or token is
    deleted: user 0 is an anonymous caller, token 0 a request without an API token (a signed-in session).
    """

    minute = models.BigIntegerField()  # whole minutes since the epoch (UTC)
    user_id = models.BigIntegerField()
    user_name = models.CharField(max_length=150)
    token_id = models.BigIntegerField()
    prompt = models.PositiveBigIntegerField(default=0)
    completion = models.PositiveBigIntegerField(default=0)
    cached = models.PositiveBigIntegerField(default=0)  # the part of the prompt read from the prefix cache

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["minute", "user_id", "token_id"], name="usage_minute_one_row_per_caller")
        ]
