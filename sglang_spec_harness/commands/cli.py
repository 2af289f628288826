"""`harness` command line: one subcommand per pipeline entry point.

Each subcommand lives in its own module, which provides `add_arguments(parser)` and
`run(args) -> int`; such a module keeps heavy imports (torch, pandas, matplotlib) inside `run`, so
that `--help` and usage errors stay instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from sglang_spec_harness import __version__
from sglang_spec_harness.errors import EXIT_BAD_INPUT, HarnessInputError, one_line

# name -> (module, one-line help). Order is the order shown in --help.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "init": ("sglang_spec_harness.commands.init", "write the shipped scenarios to DIR/scenarios/ (to edit and run)"),
    "validate": ("sglang_spec_harness.commands.validate", "check scenario files (FILE:LINE: field: problem)"),
    "scenario-info": ("sglang_spec_harness.commands.scenario_info", "the machine each scenario needs and its CI runner labels (a job matrix)"),
    "run": ("sglang_spec_harness.commands.run", "run a scenario: both variants, workload, profiler, trace analysis, then its rules' verdict"),
    "analyze": ("sglang_spec_harness.commands.analyze", "count kernels (or CPU ops) per CUDA graph launch and region in traces"),
    "check": ("sglang_spec_harness.commands.check", "evaluate a stored run's rules: PASS / FAIL / INCONCLUSIVE (exit 0 / 1 / 3)"),
    "compare": ("sglang_spec_harness.commands.compare", "compare two stored runs of one scenario (e.g. yesterday's and today's)"),
    "report": ("sglang_spec_harness.commands.report", "rebuild a run's report: index.html, junit.xml, summary.md"),
    "history": ("sglang_spec_harness.commands.history", "results database across runs: ingest runs; change points and the trend page; export for dashboards"),
    "sweep": ("sglang_spec_harness.commands.sweep", "run the candidate at each SGLang release of a range: history points, change points explained"),
    "bisect": ("sglang_spec_harness.commands.bisect", "find the commit (or SGLang release) at which the scenario's rules' verdict changed"),
}


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors: one line and exit 2, as for every other bad input."""

    def error(self, message: str) -> NoReturn:  # pragma: no cover - exercised through main()
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="harness", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    sub.required = True
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def with_default_action(argv: list[str]) -> list[str]:
    """`harness sweep SCENARIO ...` is `harness sweep run SCENARIO ...`: a command whose module names
    a DEFAULT_ACTION among its ACTIONS takes it when the next word is none of them."""
    if len(argv) < 2 or argv[0] not in SUBCOMMANDS:
        return argv
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    default = getattr(module, "DEFAULT_ACTION", None)
    if default is None or argv[1] in (*module.ACTIONS, "-h", "--help"):
        return argv
    return [argv[0], default, *argv[1:]]


def main(argv: list[str] | None = None) -> int:
    # From the start, SIGINT, SIGTERM and SIGHUP raise an exception (so cleanup runs) and end the
    # command with 128 + signal and one line.
    from sglang_spec_harness.run.interrupts import exit_code_after, interrupt_signum, signals_raise_interrupt

    name = "harness"
    try:
        with signals_raise_interrupt():
            parser = build_parser()
            args = parser.parse_args(with_default_action(list(sys.argv[1:] if argv is None else argv)))
            name = f"harness {args.command}"
            code = int(args._module.run(args) or 0)
            final = exit_code_after(code)
            if final != code:  # interrupted inside a finalizer: it went on to the end
                print(f"{name}: interrupted", file=sys.stderr)
            return final
    except HarnessInputError as exc:
        print(f"{name}: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as exc:
        # Commands check their extras before they start; this catches a path that did not.
        from sglang_spec_harness.extras import extra_of_module, install_hint

        extra = extra_of_module(exc.name or "")
        if extra is None:
            raise
        print(f"{name}: {install_hint([extra])} (no module named {exc.name!r})", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # e.g. results.json or the report on a full disk: one line, never a traceback
        what = f"cannot write or read {exc.filename}" if exc.filename else "cannot write its output or read its input"
        print(f"{name}: {what}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        signum = interrupt_signum(exc)
        print(f"{name}: interrupted", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
