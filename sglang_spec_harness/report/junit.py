"""junit.xml: one test case per rule in results.json, for CI test-result publishers.

FAIL -> <failure message=reason>, INCONCLUSIVE -> <skipped message=reason>, PASS -> a plain test
case. A run without results.json (or without rules) is one test case with an <error>, so that a CI
publisher never shows "all green" on missing evidence. Informational rules (INFO: no bound set, so
they cannot fail) go to a second test suite, `<suite>.informational`, as <skipped type="INFO">:
shown apart, and never counted as passed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

from sglang_spec_harness.errors import encodable
from sglang_spec_harness.files import write_text_atomic
from sglang_spec_harness.pages.numbers import fixed
from sglang_spec_harness.report.data import ReportData
from sglang_spec_harness.rundir.rule_numbers import numbers_of
from sglang_spec_harness.vocabulary import Verdict


def _duration_s(run: dict[str, Any]) -> float:
    try:
        started = datetime.fromisoformat(str(run["started"]))
        finished = datetime.fromisoformat(str(run["finished"]))
    except (KeyError, TypeError, ValueError):
        return 0.0
    return max(0.0, (finished - started).total_seconds())


def _details(rule: dict[str, Any]) -> str:
    """The body of a failure/skip element: reason, preconditions and numbers, for a CI log."""
    lines = [str(rule.get("reason") or "")]
    if rule.get("description"):
        lines.append(f"rule: {rule['description']}")
    for pre in rule.get("preconditions") or []:
        if isinstance(pre, dict):
            mark = "ok" if pre.get("ok") else "NOT MET"
            lines.append(f"precondition [{mark}] {pre.get('what', '')}: {pre.get('detail', '')}")
    numbers = numbers_of(rule)
    if numbers is not None:
        written = numbers.model_dump(mode="json")
        scalars = {k: v for k, v in written.items() if isinstance(v, (int, float, str)) or v is None}
        if scalars:
            lines.append("numbers: " + ", ".join(f"{k}={v}" for k, v in scalars.items()))
    return "\n".join(lines)


def junit_tree(data: ReportData) -> ET.ElementTree[ET.Element]:
    suite_name = f"harness.{data.scenario_name}"
    rules = data.rules
    duration = _duration_s(data.run)
    root = ET.Element("testsuites", name="harness")
    suite = ET.SubElement(root, "testsuite", name=suite_name)
    timestamp = (data.results or {}).get("evaluated_at") or data.run.get("started")
    if timestamp:
        suite.set("timestamp", str(timestamp))
    hostname = data.environment.get("hostname") or data.environment.get("host")
    if isinstance(hostname, str) and hostname:
        suite.set("hostname", hostname)

    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_dir", str(data.run_dir)),
        ("verdict", data.verdict or "none"),
        ("run_status", str(data.run.get("status") or (data.results or {}).get("run_status") or "unknown")),
    ):
        ET.SubElement(properties, "property", name=name, value=value)

    failures = skipped = errors = 0
    judged = [r for r in rules if r.get("verdict") != Verdict.INFO]
    info = [r for r in rules if r.get("verdict") == Verdict.INFO]
    if not rules:
        errors = 1
        case = ET.SubElement(suite, "testcase", classname=suite_name, name="results", time="0")
        why = (
            "results.json is missing or unreadable: no rule was evaluated"
            if data.results is None
            else "results.json holds no rules: nothing was evaluated"
        )
        error = ET.SubElement(case, "error", message=why, type="MissingEvidence")
        error.text = "\n".join(data.notes)
    for rule in judged:
        verdict = rule.get("verdict")
        reason = str(rule.get("reason") or "")
        case = ET.SubElement(
            suite, "testcase", classname=f"{suite_name}.{rule.get('kind', 'rule')}", name=str(rule.get("name", "?")), time="0"
        )
        if verdict == Verdict.FAIL:
            failures += 1
            element = ET.SubElement(case, "failure", message=reason, type=Verdict.FAIL)
            element.text = _details(rule)
        elif verdict == Verdict.PASS:
            continue
        else:  # INCONCLUSIVE, NOT_RUN, or anything unknown: never a pass
            skipped += 1
            message = (reason if verdict == Verdict.INCONCLUSIVE else f"{Verdict.NOT_RUN}: {reason}"
                       if verdict == Verdict.NOT_RUN else f"verdict {verdict!r}: {reason}")
            element = ET.SubElement(case, "skipped", message=message)
            element.text = _details(rule)

    _set_counts(suite, tests=max(len(judged), 1) if not info else len(judged), failures=failures, errors=errors,
                skipped=skipped, duration=duration)
    if info:
        info_name = f"{suite_name}.informational"
        info_suite = ET.SubElement(root, "testsuite", name=info_name)
        for rule in info:
            case = ET.SubElement(info_suite, "testcase", classname=f"{info_name}.{rule.get('kind', 'rule')}",
                                 name=str(rule.get("name", "?")), time="0")
            element = ET.SubElement(case, "skipped", type=Verdict.INFO, message=f"{Verdict.INFO}: {rule.get('reason') or ''}")
            element.text = _details(rule)
        _set_counts(info_suite, tests=len(info), failures=0, errors=0, skipped=len(info), duration=0.0)
    _set_counts(root, tests=max(len(rules), 1), failures=failures, errors=errors, skipped=skipped + len(info),
                duration=duration)
    ET.indent(root)
    return ET.ElementTree(root)


# Characters XML 1.0 does not allow even escaped (a kernel name or an error message may hold them).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _set_counts(element: ET.Element, *, tests: int, failures: int, errors: int, skipped: int, duration: float) -> None:
    element.set("tests", str(tests))
    element.set("failures", str(failures))
    element.set("errors", str(errors))
    element.set("skipped", str(skipped))
    element.set("time", fixed(duration, 3))


def write_junit(data: ReportData, path: Path) -> Path:
    text = ET.tostring(junit_tree(data).getroot(), encoding="unicode")
    text = _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", encodable(text))
    write_text_atomic(path, "<?xml version='1.0' encoding='utf-8'?>\n" + text)
    return path
