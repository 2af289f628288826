"""The harness's pytest plugin (entry point `harness` in `pytest11`): the `sglang_profile` fixture.

Inert unless a test asks for the fixture: loading the plugin imports pytest alone, and the
fixture imports `sglang_spec_harness.testing` (pandas, the trace analysis, httpx) when it is first used.

    def test_no_softmax_in_the_draft(sglang_profile):
        profile = sglang_profile("http://127.0.0.1:30000", num_steps=16)
        assert set(profile.count("softmax", region="DRAFT_DECODE")) == {0}

A fixture reaches pytest-style test functions only. A unittest.TestCase (SGLang's suites, run as
`python3 FILE`, where no fixture runs) calls `sglang_spec_harness.testing.profile_server` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sglang_spec_harness.testing import ServerProfile


@pytest.fixture
def sglang_profile(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., ServerProfile]:
    """`profile(base_url, **options) -> ServerProfile`: `sglang_spec_harness.testing.profile_server` with each
    profile's traces in a fresh directory under pytest's temporary directory (kept for the last
    runs, so that a failing count can be looked at with `harness analyze`)."""
    from sglang_spec_harness.testing import profile_server

    def profile(base_url: str, **options: Any) -> ServerProfile:
        options.setdefault("output_dir", tmp_path_factory.mktemp("sglang-profile"))
        return profile_server(base_url, **options)

    return profile
