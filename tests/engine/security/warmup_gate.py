"""Shared with the python model of test_config_limits: it counts warm-up runs and blocks the first until released."""

import threading

calls = 0
entered = threading.Event()
release = threading.Event()


def reset() -> None:
    global calls
    calls = 0
    entered.clear()
    release.clear()
