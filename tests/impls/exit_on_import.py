"""Calls sys.exit(0) while being imported."""

import sys

sys.exit(0)
