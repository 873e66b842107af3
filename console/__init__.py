"""Infera's console: the Django project that manages models, versions, users and live charts."""
