"""A real install: servers import the harness from a folder of its own (never the harness environment's
site-packages), the scenarios ship with the package (`harness run NAME`, `harness init DIR`), and a
wheel installed into a fresh venv runs the default scenario from a directory outside the source tree.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sglang_spec_harness.import_root as import_root
from sglang_spec_harness.commands import cli
from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT, variant_environment
from sglang_spec_harness.errors import EXIT_BAD_INPUT, HarnessInputError
from sglang_spec_harness.scenario import load_scenario
from sglang_spec_harness.shipped import names_relative_paths, scenario_path, shipped_names

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO / "sglang_spec_harness"


# ---- the import root: a folder with the harness and nothing else -------------------------------------


def test_the_import_root_holds_only_the_harness_package():
    root = import_root.harness_import_root()
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == ["sglang_spec_harness"]
    assert (root / "sglang_spec_harness").resolve() == PACKAGE_DIR
    assert not root.resolve().is_relative_to(REPO)


def test_a_server_path_has_the_import_root_not_the_folder_holding_the_package(tmp_path):
    scenario = load_scenario(REPO / "scenarios" / "micro_topk1.yaml")
    pythonpath = variant_environment(scenario, "candidate", profile_dir=tmp_path)["PYTHONPATH"].split(os.pathsep)
    assert str(import_root.harness_import_root()) in pythonpath
    assert str(HARNESS_SOURCE_ROOT) not in pythonpath


def test_concurrent_runs_share_one_link(tmp_path, monkeypatch):
    roots: list[Path] = []
    errors: list[BaseException] = []

    def make() -> None:
        try:
            roots.append(import_root._cached_import_root(tmp_path))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(roots)) == 1
    (root,) = set(roots)
    assert [p.name for p in root.iterdir()] == ["sglang_spec_harness"]  # no staged link left behind
    assert os.readlink(root / "sglang_spec_harness") == str(PACKAGE_DIR)


def test_a_link_to_elsewhere_is_repaired(tmp_path):
    root = import_root._cached_import_root(tmp_path)
    (root / "sglang_spec_harness").unlink()
    (root / "sglang_spec_harness").symlink_to(tmp_path, target_is_directory=True)  # a moved or removed install
    assert import_root._cached_import_root(tmp_path) == root
    assert (root / "sglang_spec_harness").resolve() == PACKAGE_DIR


def test_an_unwritable_cache_falls_back_to_a_folder_of_the_process_own(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(import_root, "IMPORT_ROOTS_CACHE", blocked / "import-roots")
    import_root.harness_import_root.cache_clear()
    try:
        root = import_root.harness_import_root()
    finally:
        import_root.harness_import_root.cache_clear()
    assert root.name.startswith("harness-import-root-") and (root / "sglang_spec_harness").resolve() == PACKAGE_DIR


def test_the_roots_of_removed_installs_are_forgotten(tmp_path):
    gone, kept = tmp_path / "cache" / "gone", tmp_path / "cache" / "kept"
    for folder in (gone, kept):
        folder.mkdir(parents=True)
    (gone / "sglang_spec_harness").symlink_to(tmp_path / "removed-venv" / "sglang_spec_harness", target_is_directory=True)
    (kept / "sglang_spec_harness").symlink_to(PACKAGE_DIR, target_is_directory=True)
    root = import_root._cached_import_root(tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(["kept", root.name])


# ---- shipped scenarios ---------------------------------------------------------------------------------


def test_a_shipped_scenario_runs_by_name_and_a_path_stays_a_path(tmp_path, monkeypatch):
    assert scenario_path("micro_topk1") == scenario_path("micro_topk1.yaml") == REPO / "scenarios" / "micro_topk1.yaml"
    assert "micro_topk1" in shipped_names() and "sglang_cpu_tiny_eagle_topk1" in shipped_names()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "micro_topk1").write_text("")  # an existing file wins over the shipped name
    assert scenario_path("micro_topk1") == Path("micro_topk1")
    assert scenario_path("scenarios/missing.yaml") == Path("scenarios/missing.yaml")  # the loader says why


def test_an_unknown_name_is_one_line_with_the_shipped_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "no_such_scenario", "--dry-run"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness run: no_such_scenario: no such file, nor a shipped scenario") and "micro_topk1" in err
    assert "\n" not in err


def test_relative_paths_are_found_in_values_only():
    assert names_relative_paths({"variants": {"a": {"python": "../.sglang-cpu/venv/bin/python"}}})
    assert names_relative_paths({"pythonpath": ["./src"]})
    assert not names_relative_paths({"description": "see ../docs", "server": {"model_path": "/m"}})


def test_init_writes_the_scenarios_and_keeps_edited_ones(tmp_path, capsys):
    assert cli.main(["init", str(tmp_path)]) == 0
    written = sorted(p.name for p in (tmp_path / "scenarios").iterdir())
    assert written == sorted(p.name for p in (REPO / "scenarios").iterdir() if p.suffix in (".yaml", ".json"))
    # ../.sglang-cpu from DIR/scenarios/ is DIR/.sglang-cpu
    tiny = load_scenario(tmp_path / "scenarios" / "sglang_cpu_tiny_eagle_topk1.yaml")
    assert tiny.server.model_path == str(tmp_path / ".sglang-cpu" / "models" / "target")
    assert cli.main(["init", str(tmp_path)]) == 0
    assert "0 file(s) written" in capsys.readouterr().out
    edited = tmp_path / "scenarios" / "micro_topk1.yaml"
    edited.write_text(edited.read_text() + "# mine\n")
    assert cli.main(["init", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "micro_topk1.yaml differ from the shipped scenarios" in capsys.readouterr().err
    assert edited.read_text().endswith("# mine\n")
    assert cli.main(["init", str(tmp_path), "--force"]) == 0
    assert edited.read_bytes() == (REPO / "scenarios" / "micro_topk1.yaml").read_bytes()


def test_init_into_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("")
    assert cli.main(["init", str(target)]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip() == f"harness init: {target}: not a directory"


def test_a_scenario_with_relative_paths_inside_a_package_asks_for_init(tmp_path, monkeypatch):
    import sglang_spec_harness.shipped as shipped

    folder = tmp_path / "sglang_spec_harness" / "scenarios"
    folder.mkdir(parents=True)
    for name in ("micro_topk1.yaml", "sglang_cpu_tiny_eagle_topk1.yaml"):
        (folder / name).write_bytes((REPO / "scenarios" / name).read_bytes())
    monkeypatch.setattr(shipped, "PACKAGE_DIR", tmp_path / "sglang_spec_harness")  # as in an installed wheel
    monkeypatch.chdir(tmp_path)
    assert scenario_path("micro_topk1") == folder / "micro_topk1.yaml"
    with pytest.raises(HarnessInputError, match=r"harness init DIR` and run DIR/scenarios/sglang_cpu_tiny_eagle_topk1.yaml"):
        scenario_path("sglang_cpu_tiny_eagle_topk1")


# ---- the wheel, in a fresh venv, outside the source tree -----------------------------------------------

WHEEL_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "sglang_spec_harness", "scenarios")
# What `make profile` installs (the Makefile's RUN_EXTRAS), torch pinned to the CPU build on local disk.
RUN_EXTRAS = "micro,report"
TORCH_SPEC = "torch==2.13.0"
# The default scenario made short: one launch per arm, the fixed design, two rounds of short answers.
SHORT = ["--set", "trials.budget=null", "--set", "trials.launches=1", "--set", "trials.repetitions=2",
         "--set", "workload.output_len=16", "--set", "profile.num_steps=8", "--set", "profile.requests=8"]


def _checked(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_wheel_in_a_fresh_venv_runs_the_default_scenario_outside_the_source_tree(tmp_path):
    assert not tmp_path.resolve().is_relative_to(REPO)
    source, dist, venv, work = tmp_path / "source", tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    source.mkdir()
    # built from a copy of what the wheel is made of: setuptools leaves build/ and *.egg-info where it builds
    for name in WHEEL_SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    _checked([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(dist)], cwd=tmp_path)
    (wheel,) = dist.glob("sglang_spec_harness-*.whl")
    # a fresh venv: not the harness's .venv, not the system's packages
    _checked([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], cwd=tmp_path)
    python, harness = venv / "bin" / "python", venv / "bin" / "harness"
    # --no-compile: byte-compiling torch's thousands of files would be most of the install's time
    _checked([str(python), "-m", "pip", "install", "-q", "--no-compile", TORCH_SPEC, f"{wheel}[{RUN_EXTRAS}]"],
             cwd=tmp_path, timeout=400)
    # the import roots go to a cache of the test's own: nothing left in the user's ~/.cache
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "XDG_CACHE_HOME": str(tmp_path / "cache")}

    # the installed package, not this checkout
    where = _checked([str(python), "-c", "import sglang_spec_harness, sglang_spec_harness.shipped as s; print(sglang_spec_harness.__file__); print(s.shipped_scenarios_dir())"],
                     cwd=work, env=env).split()
    site_packages = Path(where[0]).parents[1]
    assert site_packages.name == "site-packages" and site_packages.is_relative_to(venv)
    assert Path(where[1]) == site_packages / "sglang_spec_harness" / "scenarios"

    # the shipped default scenario by name, from a directory outside the source tree
    proc = subprocess.run([str(harness), "run", "micro_topk1", "--out", "runs", "--no-progress", "--json", *SHORT],
                          cwd=work, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode in (0, 1, 3), proc.stderr[-3000:]
    outcome = json.loads(proc.stdout)
    run_dir = work / outcome["run_dir"]  # relative to the working directory, as --out was
    assert run_dir.parent == work / "runs"
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE") and outcome["verdict"] == results["verdict"]
    assert (run_dir / "index.html").is_file()

    # every launched server's PYTHONPATH (as its launch recorded it): the import root, no site-packages
    commands = [json.loads(p.read_text())["command"] for p in run_dir.rglob("launch.json")]
    assert len(commands) == 2
    for command in commands:
        env_part = dict(word.split("=", 1) for word in shlex.split(command) if "=" in word and not word.startswith("-"))
        entries = env_part["PYTHONPATH"].split(os.pathsep)
        assert not any("site-packages" in entry for entry in entries), entries
        (root,) = [Path(e) for e in entries if Path(e).is_relative_to(tmp_path / "cache")]
        assert [p.name for p in root.iterdir()] == ["sglang_spec_harness"]
        assert (root / "sglang_spec_harness").resolve() == site_packages / "sglang_spec_harness"

    # `harness init` writes the scenarios out; the one with ../.sglang-cpu runs from there, not by name
    _checked([str(harness), "init", "."], cwd=work, env=env)
    assert (work / "scenarios" / "micro_topk1.yaml").is_file()
    _checked([str(harness), "validate", "scenarios/micro_topk1.yaml"], cwd=work, env=env)
    by_name = subprocess.run([str(harness), "run", "sglang_cpu_tiny_eagle_topk1", "--dry-run"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert by_name.returncode == EXIT_BAD_INPUT and "harness init DIR" in by_name.stderr
