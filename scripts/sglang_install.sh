#!/usr/bin/env bash
# SGLang on a GPU runner, installed as SGLang's own CI installs it: `make sglang-install` runs this.
#   scripts/sglang_install.sh          install (then, in a NEW step, `make harness-beside`)
#   scripts/sglang_install.sh --kind   only say how it would install: one line, `KIND SCRIPT`
#
# The source (exactly one; default the registry's sglang==0.5.23, what the scenarios pin):
#   SGLANG_REF=<git ref of $SGLANG_REPO>, fetched into $SGLANG_SRC (a workflow checks it out itself
#   and passes SGLANG_PATH=.sglang-src), SGLANG_PATH=<checkout, sdist, wheel>, SGLANG_SPEC=<pip spec>.
# KIND:
#   sglang-ci  the checkout has SGLang's CUDA CI install script (the table below): it runs from the
#              checkout's root, as SGLang's workflows run it (`bash scripts/ci/cuda/ci_install_dependency.sh`
#              in _pr-test-stage.yml and nightly-test-nvidia.yml), with whatever CI environment the job
#              sets (SGLANG_IS_IN_CI, USE_VENV, CU_VERSION, IS_BLACKWELL...). It installs SGLang into the
#              runner's python3, or into a venv it puts first on PATH through $GITHUB_PATH, which only a
#              later step sees: so the harness goes in beside it in the next step (make harness-beside).
#   harness    no such script (a release, a wheel, or a checkout older than the script): the harness's
#              own install, scripts/install_sglang_gpu.sh (SGLang and the harness into $VENV).
# SGLANG_INSTALL=harness forces the fallback; =sglang-ci refuses to run without SGLang's script.
# SGLang's ROCm install runs inside SGLang's CI container (scripts/ci/amd/amd_ci_start_container.sh,
# then every command through amd_ci_exec.sh), where the harness does not run: refused, one line.
set -euo pipefail
cd "$(dirname "$0")/.."

# SGLang's own CI install scripts, newest layout first (sgl-project/sglang: scripts/ci/cuda/ holds the
# CUDA one; older checkouts kept it in scripts/ci/). Version-specific paths: data, not logic.
CUDA_INSTALL_SCRIPTS=(scripts/ci/cuda/ci_install_dependency.sh scripts/ci/ci_install_dependency.sh)
ROCM_INSTALL_SCRIPTS=(scripts/ci/amd/amd_ci_install_dependency.sh scripts/ci/amd_ci_install_dependency.sh)

SGLANG_REPO="${SGLANG_REPO:-https://github.com/sgl-project/sglang.git}"
SGLANG_SRC="${SGLANG_SRC:-.sglang-src}"
SGLANG_INSTALL="${SGLANG_INSTALL:-auto}"
SGLANG_REF="${SGLANG_REF:-}" SGLANG_SPEC="${SGLANG_SPEC:-}" SGLANG_PATH="${SGLANG_PATH:-}"

case "$SGLANG_INSTALL" in
  auto | sglang-ci | harness) ;;
  *) echo "sglang-install: SGLANG_INSTALL=$SGLANG_INSTALL: expected auto, sglang-ci or harness" >&2; exit 2 ;;
esac
given=0
for v in "$SGLANG_REF" "$SGLANG_SPEC" "$SGLANG_PATH"; do [ -n "$v" ] && given=$((given + 1)); done
if [ "$given" -gt 1 ]; then
  echo "sglang-install: give one of SGLANG_REF, SGLANG_SPEC, SGLANG_PATH (got $given)" >&2
  exit 2
fi

# the checkout whose scripts are looked at (none for a spec or a wheel)
checkout=""
if [ -n "$SGLANG_REF" ]; then
  checkout="$SGLANG_SRC"
elif [ -n "$SGLANG_PATH" ] && [ -f "$SGLANG_PATH/python/pyproject.toml" ]; then
  checkout="$SGLANG_PATH"
fi

find_script() {  # the first of the given paths the checkout has
  local path
  for path in "$@"; do
    if [ -n "$checkout" ] && [ -f "$checkout/$path" ]; then echo "$path"; return; fi
  done
}

kind_of() {
  local cuda rocm
  cuda=$(find_script "${CUDA_INSTALL_SCRIPTS[@]}")
  rocm=$(find_script "${ROCM_INSTALL_SCRIPTS[@]}")
  if [ "$SGLANG_INSTALL" = harness ]; then
    echo "harness scripts/install_sglang_gpu.sh"
  elif [ -n "$cuda" ]; then
    echo "sglang-ci $cuda"
  elif [ -n "$rocm" ]; then
    echo "sglang-rocm $rocm"
  elif [ "$SGLANG_INSTALL" = sglang-ci ]; then
    echo "none -"
  else
    echo "harness scripts/install_sglang_gpu.sh"
  fi
}

if [ "${1:-}" = "--kind" ]; then
  if [ -n "$SGLANG_REF" ] && [ ! -d "$SGLANG_SRC" ]; then
    echo "sglang-install: --kind with SGLANG_REF needs the checkout in $SGLANG_SRC first" >&2
    exit 2
  fi
  kind_of
  exit 0
fi

fetched=""
if [ -n "$SGLANG_REF" ] && [ "$SGLANG_INSTALL" != harness ]; then
  scripts/fetch_sglang_ref.sh "$SGLANG_REPO" "$SGLANG_REF" "$SGLANG_SRC"
  fetched=1
fi
read -r kind script <<< "$(kind_of)"
case "$kind" in
  sglang-ci)
    echo "sglang-install: SGLang's own CI install: (cd $checkout && bash $script)"
    (cd "$checkout" && bash "$script")
    echo "sglang-install: done by SGLang's $script; next, in a new step: make harness-beside"
    ;;
  sglang-rocm)
    echo "sglang-install: $checkout has SGLang's ROCm install ($script), which runs inside SGLang's CI container" \
      "(scripts/ci/amd/amd_ci_start_container.sh, amd_ci_exec.sh) where the harness does not run; set" \
      "SGLANG_INSTALL=harness for the harness's own install" >&2
    exit 2
    ;;
  none)
    echo "sglang-install: SGLANG_INSTALL=sglang-ci but ${checkout:-the source (no checkout)} has none of" \
      "${CUDA_INSTALL_SCRIPTS[*]}" >&2
    exit 2
    ;;
  *)
    # a ref fetched above is installed as the checkout it now is
    if [ -n "$fetched" ]; then SGLANG_PATH="$SGLANG_SRC" SGLANG_REF=""; fi
    echo "sglang-install: no SGLang CI install script in ${checkout:-the source}: the harness's own ($script)"
    SGLANG_REF="$SGLANG_REF" SGLANG_PATH="$SGLANG_PATH" SGLANG_SPEC="$SGLANG_SPEC" "$script"
    ;;
esac
