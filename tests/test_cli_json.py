"""`--json` on bad input: every command that takes `--json` prints one JSON object on stdout (besides
its one line on stderr) and exits 2, for a usage error and for bad input found once it runs. The
commands are found in the parser, so a new `--json` command is covered (and needs its bad input here)."""

from __future__ import annotations

import argparse
import json

import pytest

from sglang_spec_harness.commands import cli


def json_commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The argv prefix of each (sub)command that takes --json."""
    found = [words] if "--json" in parser._option_string_actions else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += json_commands(sub, (*words, name))
    return found


# per command: arguments that it refuses once it runs (not a usage error), and what its message says
BAD_INPUT = {
    ("scenario-info",): (["absent.yaml"], "absent.yaml: no such file, nor a shipped scenario"),
    ("run",): (["absent.yaml"], "absent.yaml: no such file, nor a shipped scenario"),
    ("analyze",): (["absent.trace.json"], "absent.trace.json: no such file"),
    ("check",): (["absent-run"], "absent-run: not a run directory"),
    ("compare",): (["absent-a", "absent-b"], "absent-a: not a run directory"),
    ("history", "report"): (["--db", "sqlite:///absent/dir/x.db", "--scenario", "x"], "cannot open the database"),
    ("sweep", "run"): (["absent.yaml", "--sglang-releases", "0.5.22..0.5.23"], "absent.yaml: no such file"),
    ("sweep", "baseline"): (["absent.yaml", "--sglang-releases", "0.5.22..0.5.23"], "absent.yaml: no such file"),
    ("sweep", "merge"): (["absent-shard"], "shard folder absent-shard: no sweep.json there"),
    ("bisect",): (["absent.yaml", "--sglang-releases", "0.5.22..0.5.23"], "absent.yaml: no such file"),
}


def test_every_json_command_is_listed_here():
    assert sorted(json_commands(cli.build_parser())) == sorted(BAD_INPUT)


@pytest.mark.parametrize("command", sorted(BAD_INPUT), ids=" ".join)
def test_bad_input_prints_one_json_object(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args, says = BAD_INPUT[command]
    for argv, message in (([*command, "--json", *args], says),  # found once the command runs
                          ([*command, "--json", "--no-such-option", *args], "unrecognized arguments: --no-such-option")):
        assert cli.main(argv) == 2
        out, err = capsys.readouterr()
        outcome = json.loads(out)  # one object, nothing else
        assert outcome["exit_code"] == 2 and outcome["status"] == "bad_input" and message in outcome["error"], out
        assert outcome.get("command", "harness run") == f"harness {' '.join(command)}"
        assert len(err.splitlines()) == 1 and outcome["error"] in err and "Traceback" not in err


def test_without_json_stdout_stays_empty_and_an_abbreviation_counts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "absent-run"]) == 2
    assert capsys.readouterr().out == ""
    assert cli.main(["check", "--js", "absent-run"]) == 2  # argparse takes --js for --json
    assert json.loads(capsys.readouterr().out)["command"] == "harness check"
    assert cli.main(["check", "--", "--json"]) == 2  # after `--`, a run directory named --json
    assert capsys.readouterr().out == ""
    # `harness sweep SCENARIO` is `harness sweep run SCENARIO`, --json included
    assert cli.main(["sweep", "--json", "absent.yaml", "--sglang-releases", "0.5.22..0.5.23"]) == 2
    assert json.loads(capsys.readouterr().out)["command"] == "harness sweep run"
