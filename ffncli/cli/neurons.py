"""``neurons`` (one text, in this process): the job, its outputs written all or nothing.
Imported only when the command runs."""

from __future__ import annotations

from pathlib import Path

from ffncli.base.files import Outputs
from ffncli.jobs import neurons as job
from ffncli.jobs.choices import ModelChoice, TextChoice, parse_layers
from ffncli.jobs.resolve import load_sequences, open_forward
from ffncli.jobs.targets import output_target
from ffncli.present import neurons as shown
from ffncli.present.progress import Bar
from ffncli.present.report import about
from ffncli.specs.spec import Overrides


def neurons_command(units: str | None, top_k: int, window: int, samples: int, seed: int,
                    vocab: bool, vocab_top: int, jsonl: Path | None, report_dir: Path | None,
                    as_json: bool, quiet: bool, model: ModelChoice, text: TextChoice) -> None:
    """``neurons``: the job in this process, its outputs written all or nothing."""
    job.check_asked(top_k, window, samples, vocab_top)
    target = output_target(jsonl, "--jsonl", model, text=text)
    with open_forward(model, Overrides()) as forward:
        sequences = load_sequences(text, forward, forward.weights) if text.given else None
        layers = parse_layers(model.layer, forward.n_layers)
        chosen = job.parse_units(units, forward.spec.d_ff)
        tokens = sequences.tokens if sequences is not None else 0
        asked = job.asked_for(tokens, top_k, window, samples, seed)
        with Outputs() as outputs:
            outputs.reserve(target, "--jsonl")
            shown.reserve_report(outputs, report_dir, layers)
            with Bar(enabled=not quiet) as bar:
                if sequences is not None:
                    bar.start(tokens * (layers[-1] + 1), "tokens x layers", per=layers[-1] + 1)
                result = job.neurons(
                    forward, sequences.ids if sequences is not None else None, layers, chosen,
                    asked, vocab_top=vocab_top if vocab or sequences is None else None,
                    source=str(text.text or text.ids) if text.given else None,
                    lines=sequences.lines if sequences is not None else (),
                    progress=bar.update)
            result = job.with_pieces(result, forward)
            if target is not None:
                outputs.text(target, shown.jsonl_text(result))
            shown.save_report(outputs, report_dir, result, about(model, text=text))
    shown.emit_neurons(result, as_json)
