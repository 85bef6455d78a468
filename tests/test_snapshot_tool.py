"""tools/snapshot.py's masks: a report's footer minute is masked, and nothing else of the page."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "snapshot.py"


@pytest.fixture(scope="module")
def snapshot():
    spec = importlib.util.spec_from_file_location("ffncli_snapshot", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_a_report_made_a_minute_later_is_the_same_page(snapshot):
    page = ('<!DOCTYPE html>\n<html><body><p>made by: <code>ffncli 0.1.0, {} UTC</code></p>'
            '<p>2026-12-05 19:09 UTC</p></body></html>')
    one, two = (snapshot.apply_masks("file", page.format(t))
                for t in ("2026-12-05 19:09", "2027-01-31 23:59"))
    assert one == two == page.format("<MASKED>").replace("<MASKED> UTC", "<MASKED>")
    assert "<p>2026-12-05 19:09 UTC</p>" in one  # only the footer's minute


def test_text_that_is_not_a_report_is_not_masked(snapshot):
    text = "made by: <code>ffncli 0.1.0, 2026-12-05 19:09 UTC</code>"
    assert snapshot.apply_masks("file", text) == text
    assert snapshot.apply_masks("output", "<!DOCTYPE html>\n" + text) == "<!DOCTYPE html>\n" + text
