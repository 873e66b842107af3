"""The security tests use the accounts tests' cast of users."""

from tests.console.accounts.conftest import admin, clean_caches, operator, viewer  # noqa: F401
