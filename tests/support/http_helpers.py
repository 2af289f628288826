"""HTTP calls for tests against local servers, with the harness's own patience.

httpx's default 5 s timeout is shorter than a loaded CI machine can take to start the torch
profiler inside a server (the first /start_profile once timed out there), so tests wait as long as
the harness itself does (sglang_spec_harness.run.profiling: 120 s) and ignore proxy settings as it does.
"""

from __future__ import annotations

import functools

import httpx

TIMEOUT_S = 120.0

get = functools.partial(httpx.get, timeout=TIMEOUT_S, trust_env=False)
post = functools.partial(httpx.post, timeout=TIMEOUT_S, trust_env=False)
