"""``permute-check --junit-xml``: one testcase per property (an ``<error>`` when the FFN
misbehaved or the check could not run), written atomically, never over an input of the command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ffncli.base.files import write_text_atomically
from ffncli.errors import OutputError, shown
from ffncli.present.check import SCALE_RULE, max_rel, tolerance

if TYPE_CHECKING:  # the result types: their modules import NumPy, which params never needs
    from xml.etree.ElementTree import Element

    from ffncli.analysis.properties import CheckReport
    from ffncli.errors import FfnError


# ---------------------------------------------------------------------------------------------
# JUnit XML for CI systems (permute-check --junit-xml).


def junit_report(path: Path | None, target: str, outcome: CheckReport | FfnError) -> None:
    """Write the report of a check, or of one that could not run, atomically to ``path``
    (from ``jobs.permute.report_path``; nothing when None). When the FFN misbehaved, its error is
    the one to show: a report that cannot be written then is left out silently."""
    if path is None:
        return
    if isinstance(outcome, BaseException):
        try:
            write_text_atomically(path, junit_error_xml(target, str(outcome),
                                                        type(outcome).__name__), "--junit-xml")
        except OutputError:
            pass
        return
    write_text_atomically(path, junit_xml(outcome), "--junit-xml")


def junit_xml(report: CheckReport) -> str:
    """One testsuite, one testcase per property, a <failure> for each that failed."""
    import xml.etree.ElementTree as ET  # only for --junit-xml

    failures = sum(not p.passed for p in report.properties)
    suites, suite = _junit_suite(len(report.properties) + len(report.skipped), failures, 0,
                                 sum(p.seconds for p in report.properties),
                                 len(report.skipped))
    for p in report.properties:
        case = ET.SubElement(suite, "testcase", classname=_classname(report.target),
                             name=p.name, time=f"{p.seconds:.6f}")
        if not p.passed:
            failure = ET.SubElement(case, "failure", message=p.counterexample or "failed",
                                    type="PropertyFailed")
            failure.text = (f"max abs deviation {p.max_abs:.3g}, max rel {max_rel(p)}, "
                            f"tolerance {tolerance(p)}"
                            + (f" ({SCALE_RULE})" if p.atol_scaled else "")
                            + f", worst token {p.worst_token}, "
                            f"bit-identical {'yes' if p.bit_identical else 'no'}"
                            + (" (required: --bitwise)" if report.bitwise else "")
                            + (f"; why, most often: {report.explanation}"
                               if report.explanation else ""))
    for name in report.skipped:  # not checked: the function is random
        case = ET.SubElement(suite, "testcase", classname=_classname(report.target), name=name,
                             time="0")
        ET.SubElement(case, "skipped", message="not checked: the function is random")
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def junit_error_xml(target: str, message: str, kind: str = "ImplError") -> str:
    """The report of a check that could not run (the implementation could not be imported,
    exited, hung, returned NaN...; or the input was refused): one testcase with an <error>, so
    that last run's report does not stay behind looking like this run's. Control characters
    are escaped: XML 1.0 cannot hold them."""
    import xml.etree.ElementTree as ET  # only for --junit-xml

    suites, suite = _junit_suite(1, 0, 1, 0.0)
    case = ET.SubElement(suite, "testcase", classname=_classname(target), name="permute-check",
                         time="0")
    ET.SubElement(case, "error", message=shown(message), type=kind)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _classname(target: str) -> str:
    return shown(f"ffncli.permute-check.{target}")


def _junit_suite(tests: int, failures: int, errors: int, seconds: float,
                 skipped: int = 0) -> tuple[Element, Element]:
    import xml.etree.ElementTree as ET  # only for --junit-xml

    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="ffncli permute-check", tests=str(tests),
                          failures=str(failures), errors=str(errors), skipped=str(skipped),
                          time=f"{seconds:.6f}")
    return suites, suite
