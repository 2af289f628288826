"""The trust boundaries of docs/trust-model.md: servers listen on loopback only; names a server or a
run directory supplies never lead a file read or write outside the run (trial) directory;
`patches:` names modules, never paths or code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from support.http_helpers import get, post
from support.micro_server import SMALL_FLAGS, start_server
from support.report_run import make_run_dir

from sglang_spec_harness.commands.cli import main
from sglang_spec_harness.errors import EXIT_BAD_INPUT, HarnessInputError
from sglang_spec_harness.report.data import load_report_data
from sglang_spec_harness.run.execute import describe_commands
from sglang_spec_harness.run.plan import plan_trials, with_run_seed
from sglang_spec_harness.run.profiling import trace_files, wait_for_traces
from sglang_spec_harness.run.server import LOOPBACK, free_port
from sglang_spec_harness.scenario import scenario_from_dict

MICRO = {"name": "sec", "engine": "micro", "variants": {"baseline": {}, "candidate": {}}}
SGLANG = {"name": "sec", "engine": "sglang", "server": {"model_path": "m"}, "variants": {"baseline": {}, "candidate": {}}}


# ---- loopback ---------------------------------------------------------------------------------------


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on `port` (from /proc/net/tcp, tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":
                found.add(address)
    return found


@pytest.mark.slow
def test_micro_server_listens_on_loopback_by_default(tmp_path):
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("needs /proc/net/tcp")
    server = start_server(tmp_path, *SMALL_FLAGS)  # no --host
    try:
        port = int(server.url.rsplit(":", 1)[1])
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing else
        assert get(f"{server.url}/server_info").json()["host"] == "127.0.0.1"
    finally:
        assert server.terminate() == 0, server.log()


@pytest.mark.parametrize("scenario", [MICRO, SGLANG], ids=["micro", "sglang"])
def test_every_server_command_binds_loopback(scenario):
    s = scenario_from_dict(json.loads(json.dumps(scenario)))
    for command in describe_commands(s, plan_trials(with_run_seed(s))).values():
        argv = command.argv
        assert argv[argv.index("--host") + 1] == LOOPBACK == "127.0.0.1"
    assert free_port() > 0  # and the harness's port search binds loopback too (its default host)


@pytest.mark.parametrize("engine", [MICRO, SGLANG], ids=["micro", "sglang"])
@pytest.mark.parametrize("flag", ["--host", "--port"])
def test_a_scenario_cannot_choose_the_address(tmp_path, capsys, engine, flag):
    data = json.loads(json.dumps(engine))
    data["variants"]["candidate"]["args"] = {flag: "0.0.0.0" if flag == "--host" else 80}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--dry-run"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"variants.candidate.args: {flag} is set by the harness" in err and err.count("\n") == 1


# ---- names from a server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def micro_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("micro_sec")
    server = start_server(root, *SMALL_FLAGS, env={"SGLANG_TORCH_PROFILER_DIR": str(root / "profile")})
    try:
        yield server, root
    finally:
        assert server.terminate() == 0, server.log()


@pytest.mark.parametrize(
    "field, value",
    [
        ("profile_prefix", "../../escaped"),
        ("profile_prefix", "a/b"),
        ("profile_prefix", ".hidden"),
        ("profile_prefix", "nul\x00byte"),
        ("profile_id", "../x"),
        ("profile_id", "/etc/cron.d/x"),
        ("profile_id", ".."),
        ("profile_id", "a\\b"),
        ("profile_id", "x" * 129),
        ("profile_id", True),
        ("output_dir", "/tmp/../etc"),
        ("output_dir", "relative/../../up"),
        ("output_dir", "/tmp/nul\x00"),
    ],
)
@pytest.mark.slow
def test_micro_server_refuses_names_that_form_a_path(micro_server, field, value):
    server, root = micro_server
    body = {"output_dir": str(root / "out"), "profile_id": "ok", "num_steps": 1, field: value}
    response = post(f"{server.url}/start_profile", json=body)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]
    assert not (root / "escaped").exists() and not list(root.parent.glob("escaped*"))
    assert get(f"{server.url}/server_info").json()["internal_states"][0]["profiling"] is False


def test_micro_server_accepts_sglang_style_names(micro_server):
    server, root = micro_server
    body = {"output_dir": str(root / "out"), "profile_prefix": "run-1", "profile_id": "1712345678.25",
            "num_steps": 1, "with_stack": False}
    assert post(f"{server.url}/start_profile", json=body).status_code == 200
    assert post(f"{server.url}/stop_profile", timeout=60).status_code == 200
    assert [p.name for p in (root / "out").iterdir()] == ["run-1-1712345678.25-TP-0.trace.json.gz"]


def test_the_harness_never_takes_a_linked_trace(tmp_path):
    """A server (or anything) that leaves a link in the profile directory cannot make the harness
    record, wait for, read or report a file outside the trial directory."""
    secret = tmp_path / "outside.trace.json"
    secret.write_text('{"traceEvents": [{"cat": "cpu_op", "name": "secret", "ts": 1, "dur": 1}]}')
    profile = tmp_path / "trial" / "profile"
    profile.mkdir(parents=True)
    (profile / "evil-TP-0.trace.json").symlink_to(secret)
    (profile / "dir.trace.json").symlink_to(tmp_path)
    real = profile / "ok-TP-0.trace.json"
    real.write_text('{"traceEvents": [{"cat": "cpu_op", "name": "ok", "ts": 1, "dur": 1}]}')
    assert trace_files(profile) == [real]
    assert wait_for_traces(profile, timeout_s=5, settle_s=0.0) == [real]


# ---- names from a run directory ---------------------------------------------------------------------


def test_report_reads_and_links_nothing_outside_the_run(tmp_path):
    run_dir = make_run_dir(tmp_path)
    outside = tmp_path / "secret.trace.json.gz"
    outside.write_bytes(b"secret")
    trial_dir = sorted((run_dir / "trials").iterdir())[0]
    info = json.loads((trial_dir / "trial.json").read_text())
    info["traces"] = ["../../../../secret.trace.json.gz", str(outside), "profile/link.trace.json.gz"]
    (trial_dir / "profile" / "link.trace.json.gz").symlink_to(outside)
    (trial_dir / "trial.json").write_text(json.dumps(info))
    (trial_dir / "server.log").unlink()
    (trial_dir / "server.log").symlink_to(outside)
    run = json.loads((run_dir / "run.json").read_text())
    run["plan"].append({"index": 50, "variant": "baseline", "kind": "timed", "repetition": 9, "dir": "../../.."})
    (run_dir / "run.json").write_text(json.dumps(run))
    data = load_report_data(run_dir)
    trial = next(t for t in data.trials if t.name == trial_dir.name)
    assert trial.trace_paths == [] and trial.server_log is None
    notes = " ".join(data.notes)
    assert notes.count("lies outside the trial directory: ignored") == 3
    assert "outside the run directory (../../..): ignored" in notes


def test_check_refuses_a_trial_linked_from_outside(tmp_path):
    from support.rundir_factory import Arm, write_run_dir

    run = write_run_dir(tmp_path, Arm([10.0] * 6), Arm([9.0] * 6))
    elsewhere = tmp_path / "elsewhere"
    (run / "trials" / "01-baseline-timed").rename(elsewhere)
    (run / "trials" / "01-baseline-timed").symlink_to(elsewhere)
    with pytest.raises(HarnessInputError, match="leads outside the run directory"):
        from sglang_spec_harness.rundir import load_run_dir

        load_run_dir(run)


# ---- patches ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sglang_spec_harness.patches.sglang_restore_topk1_softmax", "mypatch", "_a.b_2.C"])
def test_patches_accept_dotted_module_names(name):
    data = json.loads(json.dumps(MICRO))
    data["variants"]["baseline"]["patches"] = [name]
    assert scenario_from_dict(data).variants["baseline"].patches == [name]


@pytest.mark.parametrize(
    "name",
    ["../evil", "/tmp/evil.py", "evil.py/x", "os;rm -rf /", "a..b", ".a", "a.", "1abc", "a b", "", "a,b",
     "__import__('os').system('x')", "a\nb", "mod\u00e9"],
)
def test_patches_refuse_anything_but_dotted_module_names(tmp_path, name):
    data = json.loads(json.dumps(MICRO))
    data["variants"]["baseline"]["patches"] = ["fine.module", name]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    with pytest.raises(HarnessInputError, match=r"s.yaml:\d+: variants\.baseline\.patches: .* is not a dotted module name"):
        from sglang_spec_harness.scenario import load_scenario

        load_scenario(path)
