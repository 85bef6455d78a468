"""A script of tools/ imported as a module, for the tests of its parts (tools/ is not a
package: it runs as scripts)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@contextmanager
def tool(name: str) -> Iterator[ModuleType]:
    """tools/<name>.py as a module, registered while in use (dataclasses look their module
    up), then forgotten."""
    spec = importlib.util.spec_from_file_location(f"ffncli_{name}", TOOLS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
