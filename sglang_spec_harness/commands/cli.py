"""`harness` command line: one subcommand per pipeline entry point.

Each subcommand lives in its own module, which provides `add_arguments(parser)` and
`run(args) -> int`; such a module keeps heavy imports (torch, pandas, matplotlib) inside `run`, so
that `--help` and usage errors stay instant.
"""

from __future__ import annotations

import argparse
import importlib
import json
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
    "gate": ("sglang_spec_harness.commands.gate", "what a CI job does with a run's verdict: pass, warn or fail (exit 0 / 0 / 1)"),
    "history": ("sglang_spec_harness.commands.history", "results database across runs: ingest runs; change points and the trend page; export for dashboards"),
    "sweep": ("sglang_spec_harness.commands.sweep", "run the candidate at each SGLang release of a range: history points, change points explained"),
    "bisect": ("sglang_spec_harness.commands.bisect", "find the commit (or SGLang release) at which the scenario's rules' verdict changed"),
}


class UsageError(SystemExit):
    """A usage error: exit 2 (SystemExit, as argparse's own), its one line said by `main`."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(EXIT_BAD_INPUT)
        self.prog, self.message = prog, message


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors: one line and exit 2, as for every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message)


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


def json_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The (sub)command `argv` names when it takes `--json` and `argv` asks for it (an abbreviation
    argparse would take counts), else None: whether its bad input is said as JSON on stdout too."""
    command, words = parser, list(argv[:argv.index("--")] if "--" in argv else argv)
    for word in words:
        sub = next((a for a in command._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and word in sub.choices:
            command = sub.choices[word]
    offers = "--json" in command._option_string_actions
    asked = any(w.startswith("--j") and "--json".startswith(w) for w in words)
    return command.prog if offers and asked else None


def json_error(command: str, message: str) -> dict[str, object]:
    """What a command with `--json` prints on stdout for bad input (exit 2): `harness run`'s own
    object (docs/schemas/run.schema.json), else {command, status, exit_code, error}."""
    if command == "harness run":
        from sglang_spec_harness.pipeline import RunOutcome

        return RunOutcome.bad_input(message).to_json_dict()
    return {"schema_version": 1, "command": command, "status": "bad_input", "exit_code": EXIT_BAD_INPUT,
            "error": message}


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

    argv = sys.argv[1:] if argv is None else list(argv)
    name, as_json = "harness", None
    try:
        with signals_raise_interrupt():
            parser = build_parser()
            argv = with_default_action(argv)
            as_json = json_command(parser, argv)
            args = parser.parse_args(argv)
            name = f"harness {args.command}"
            code = int(args._module.run(args) or 0)
            final = exit_code_after(code)
            if final != code:  # interrupted inside a finalizer: it went on to the end
                print(f"{name}: interrupted", file=sys.stderr)
            return final
    except UsageError as exc:
        return _bad_input(as_json, f"{exc.prog}: error", exc.message)
    except HarnessInputError as exc:
        return _bad_input(as_json, name, one_line(exc))
    except ModuleNotFoundError as exc:
        # Commands check their extras before they start; this catches a path that did not.
        from sglang_spec_harness.extras import extra_of_module, install_hint

        extra = extra_of_module(exc.name or "")
        if extra is None:
            raise
        return _bad_input(as_json, name, f"{install_hint([extra])} (no module named {exc.name!r})")
    except OSError as exc:  # e.g. results.json or the report on a full disk: one line, never a traceback
        what = f"cannot write or read {exc.filename}" if exc.filename else "cannot write its output or read its input"
        return _bad_input(as_json, name, f"{what}: {exc.strerror or exc}")
    except KeyboardInterrupt as exc:
        signum = interrupt_signum(exc)
        print(f"{name}: interrupted", file=sys.stderr)
        return 128 + signum


def _bad_input(as_json: str | None, name: str, message: str) -> int:
    """`NAME: MESSAGE` on stderr; with `--json`, also one JSON object on stdout. Exit 2."""
    print(f"{name}: {message}", file=sys.stderr)
    if as_json is not None:
        print(json.dumps(json_error(as_json, message), indent=2), flush=True)
    return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
