"""Hangs while being imported."""

import time

time.sleep(1e9)
