"""tools/snapshot.py's masks: a report's footer minute is masked, and nothing else of the page."""

from __future__ import annotations

import pytest
from helpers.tools import tool


@pytest.fixture(scope="module")
def snapshot():
    with tool("snapshot") as module:
        yield module


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
