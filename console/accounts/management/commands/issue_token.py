"""`manage.py issue_token USERNAME [--name N] [--expires-days D]`: prints the new key alone on its last line."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from console.accounts.forms import MAX_EXPIRY_DAYS
from console.accounts.roles import role_of
from console.accounts.tokens import issue_token


class Command(BaseCommand):
    """Issue an API token for a user; scripts take the key from the last line of output."""

    help = "Issue an API token; the key is printed alone on the last line and never again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="a name to recognise the token by (default: cli)")
        parser.add_argument("--expires-days", type=int, default=None, help="lifetime in days (default: never)")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        try:
            user = users.objects.get(username=options["username"])
        except users.DoesNotExist:
            raise CommandError(f"no user named '{options['username']}'") from None
        if not user.is_active:
            raise CommandError(f"user '{user.get_username()}' is deactivated")
        if role_of(user) is None:
            raise CommandError(f"user '{user.get_username()}' has no role; give it one first")
        days = options["expires_days"]
        if days is not None and not 1 <= days <= MAX_EXPIRY_DAYS:
            raise CommandError(f"--expires-days must be between 1 and {MAX_EXPIRY_DAYS}, got {days}")
        expires = None if days is None else timezone.now() + timedelta(days=days)
        try:
            token, key = issue_token(user, options["name"], expires, actor="shell")
        except ValueError as refused:
            raise CommandError(str(refused)) from None
        until = f"until {token.expires:%Y-%m-%d %H:%M} UTC" if token.expires else "without expiry"
        self.stdout.write(f"token '{token.name}' for '{user.get_username()}' ({role_of(user)}), valid {until}")
        self.stdout.write(key)
