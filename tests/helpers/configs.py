"""Bad and mutated config.json files of supported types, as test_hfconfig.py and
test_zoo_encoders.py check them: one error line naming the key and exit 2, or a count."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from ffncli.counting.model import count
from ffncli.errors import FfnError
from ffncli.specs.archs import spec_from_config

# Any JSON value a key could be set to.
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.floats(allow_nan=True),
                   st.text(max_size=4), st.lists(st.integers(-1, 5), max_size=3))


def assert_one_line(cli, tmp_path, config: dict, message: str) -> None:
    """`params --config` on the config: exit 2, nothing on stdout, one line naming the file."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def assert_counts_or_fails_in_one_line(config: dict) -> None:
    try:
        c = count(spec_from_config(config, "c.json"))
    except FfnError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("c.json")
    else:
        assert c.total > 0 and c.active <= c.total
