# The two commands a user needs: `make profile` and `make test`. Both set themselves up.
# Contributors: `make lint` (ruff and mypy, settings in pyproject.toml), which CI runs before the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= scenarios/micro_topk1.yaml
# Torch is pinned to the CPU build that CPU machines have locally; GPU runners install their own.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
# What `make profile` needs (the micro engine and the report), without the test tools (Playwright,
# Triton, psycopg, mypy...): a first `make profile` installs only these; `make test` adds the rest.
RUN_STAMP := $(VENV)/.installed-run
RUN_EXTRAS := micro,report

# The real SGLang 0.5.23 server on a CPU (scenarios/sglang_cpu_tiny_eagle_topk1.yaml): its own
# virtual environment and tiny models under $(SGLANG_CPU), apart from $(VENV). Opt-in; .ci/run does it.
SGLANG_CPU ?= .sglang-cpu

.PHONY: install lint test test-quick test-sglang-cpu profile clean sglang-cpu sglang-cpu-releases

# $(call venv_with,EXTRAS): the venv, torch (unless one is there: a GPU runner's CUDA build), the harness
define venv_with
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[$(1)]"
endef

$(STAMP): pyproject.toml
	$(call venv_with,test)
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	$(call venv_with,$(RUN_EXTRAS))
	touch $(RUN_STAMP)

install: $(STAMP)

# Static checks: ruff over the Python trees, mypy over harness/ (its `files`), and the committed JSON
# Schemas (scenarios/, docs/schemas/) against the models they are generated from.
lint: $(STAMP)
	$(BIN)/ruff check harness tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/python scripts/json_schemas.py --check

# The suite on two workers, a test file per worker at a time (its module fixtures are set up once),
# without the tests of the real SGLang server (their own target: they need the whole machine).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not real_sglang" $(PYTEST_ARGS)

# The quick loop while editing: without the tests that start servers or whole runs.
test-quick: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow and not real_sglang" $(PYTEST_ARGS)

# The real SGLang server on this CPU (needs `make sglang-cpu`), one test at a time.
test-sglang-cpu: $(STAMP)
	$(BIN)/python -m pytest -m real_sglang $(PYTEST_ARGS)

# GNU make exits 2 whenever a recipe fails, whatever the recipe's own status (make can only return
# 0, 1 for -q, or 2). So the verdict's code is said on the last line; `harness run` returns it.
profile: $(RUN_STAMP)
	@$(BIN)/harness run $(SCENARIO) $(RUN_ARGS); status=$$?; \
	if [ $$status -ne 0 ]; then \
	  echo "make profile: harness run exited $$status (1 FAIL, 2 bad input, 3 INCONCLUSIVE, 130 interrupted); make reports any of them as 2: run '$(BIN)/harness run $(SCENARIO)' for the verdict's own exit code" >&2; \
	fi; exit $$status

sglang-cpu: $(RUN_STAMP)
	$(BIN)/python -m harness.sglang_cpu.install --prefix $(SGLANG_CPU)

# Older SGLang releases' environments on top of it (harness/sglang_cpu/releases.toml), each checked by
# importing its EAGLE worker: make sglang-cpu-releases RELEASES="0.5.12.post1 0.5.13"
RELEASES ?=
sglang-cpu-releases: $(RUN_STAMP)
	@test -n "$(RELEASES)" || { echo 'make sglang-cpu-releases: name them, e.g. RELEASES="0.5.12.post1 0.5.13"' >&2; exit 2; }
	$(BIN)/python -m harness.sglang_cpu.install --prefix $(SGLANG_CPU) $(foreach r,$(RELEASES),--release $(r))

clean:
	rm -rf $(VENV) $(SGLANG_CPU) .pytest_cache
