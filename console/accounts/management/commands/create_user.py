"""`manage.py create_user NAME --role admin|operator|viewer|inference [--password P]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.accounts.roles import Role
from console.accounts.user_admin import AccountRuleError, create_user


class Command(BaseCommand):
    """Create an account with one role; a generated password is printed once."""

    help = "Create a user with a role. Without --password, console roles get a generated one (printed once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=[role.value for role in Role])
        parser.add_argument("--password", default=None, help="the password (checked against the password rules)")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            created = create_user(
                options["username"], options["role"], options["password"], options["email"], actor="shell"
            )
        except AccountRuleError as refused:
            raise CommandError(str(refused)) from None
        name = created.user.get_username()
        self.stdout.write(f"created user '{name}' with role {options['role']}")
        if created.generated_password:
            self.stdout.write(f"password (shown once): {created.generated_password}")
        elif options["role"] == Role.INFERENCE and options["password"] is None:
            self.stdout.write(f"no password: issue a token with `manage.py issue_token {name}`")
