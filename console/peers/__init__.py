"""Serving processes that work together: their names, and how workers on one host talk without Redis."""
