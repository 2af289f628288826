#!/bin/bash
# A STAND-IN for SGLang's scripts/ci/cuda/ci_install_dependency.sh (not SGLang's file): .ci/run puts it
# in the local repository in SGLang's layout that it builds from the 0.5.23 wheel, so that the GPU
# workflow's install detection finds SGLang's script and runs it as SGLang's CI does. On a CPU it
# does what the workflow relies on the real one doing:
# - it must run from the checkout's root (the real one reads python/pyproject.toml relative to it);
# - it installs SGLang from this checkout, and what SGLang imports, into a virtual environment: here
#   the harness's CPU build (python -m sglang_spec_harness.sglang_cpu.install, into the workspace's
#   .sglang-cpu, where the CPU scenario looks), plus `datasets`, which the real one brings with SGLang's
#   `dev` extra and sglang.test.test_utils imports;
# - it puts that environment first for the later steps through $GITHUB_PATH and $GITHUB_ENV, as the
#   real one does for its uv venv (USE_VENV=1, or a runner whose python3 is not 3.12);
# - and it records that it ran, where and with which CI environment: .ci-install-dependency.json in
#   the checkout's root, which .ci/run checks.
set -euxo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/../../.." && pwd)"
[ -f python/pyproject.toml ] || { echo "FATAL: run from the SGLang checkout's root (python/pyproject.toml), as SGLang's CI does"; exit 1; }
: "${GITHUB_WORKSPACE:?the workflow workspace: the harness checkout, whose CPU build this stand-in uses}"
: "${GITHUB_PATH:?the GITHUB_PATH file of a workflow step}"

python3 - "$REPO_ROOT/.ci-install-dependency.json" "$@" <<'PY'
import json, os, sys, time
keys = ("SGLANG_IS_IN_CI", "SGLANG_CUDA_COREDUMP", "SGLANG_JIT_DEEPGEMM_FAST_WARMUP", "USE_VENV", "CU_VERSION", "IS_BLACKWELL")
json.dump({"cwd": os.getcwd(), "args": sys.argv[2:], "env": {k: os.environ.get(k) for k in keys},
           "ran": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, open(sys.argv[1], "w"), indent=2)
PY

prefix="$GITHUB_WORKSPACE/.sglang-cpu"
PYTHONPATH="$GITHUB_WORKSPACE" python3 -m sglang_spec_harness.sglang_cpu.install --prefix "$prefix" --sglang "$REPO_ROOT"
"$prefix/venv/bin/python" -m pip install --quiet --disable-pip-version-check datasets

echo "$prefix/venv/bin" >> "$GITHUB_PATH"
if [ -n "${GITHUB_ENV:-}" ]; then echo "VIRTUAL_ENV=$prefix/venv" >> "$GITHUB_ENV"; fi
