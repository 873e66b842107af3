"""Users, roles, API tokens and web safety for the Infera console (Django app label `accounts`)."""
