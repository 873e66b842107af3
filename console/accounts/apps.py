"""The accounts app's configuration: keeps the role groups in place after every migrate."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    """Users, roles and API tokens."""

    name = "console.accounts"
    label = "accounts"
    verbose_name = "Accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # login_throttle and revocations hold signal receivers, schema an OpenAPI extension: importing registers them
        from console.accounts import login_throttle, revocations, schema, signals  # noqa: F401

        revocations.connect_user_signals()
        # no sender: the groups must also pick up permissions of apps migrated after this one
        post_migrate.connect(signals.ensure_groups_after_migrate, dispatch_uid="accounts.ensure_groups")
