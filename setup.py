"""Everything about the package is in pyproject.toml; this file only ships `scenarios/` inside it.

The scenarios live at the top of the repository (their `../.sglang-cpu` paths are relative to their
file, so they stay where `make sglang-cpu` puts `.sglang-cpu`). A wheel carries a copy in
`sglang_spec_harness/scenarios/`, where `harness run NAME` and `harness init DIR` find them; an editable install
finds the repository's own (sglang_spec_harness/shipped.py).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


class BuildPyWithScenarios(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the repository's scenarios/ is found next to the package
            return
        target = Path(self.build_lib) / "sglang_spec_harness" / "scenarios"
        self.mkpath(str(target))
        for source in sorted(SCENARIOS.iterdir()):
            if source.suffix in (".yaml", ".json"):
                self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildPyWithScenarios})
