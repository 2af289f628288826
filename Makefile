# The two commands a user needs: `make profile` and `make test`. Both set themselves up.
# Contributors: `make lint` (ruff and mypy, settings in pyproject.toml; actionlint and zizmor over
# .github/workflows), which CI runs before the tests.
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

.PHONY: install lint test test-quick test-sglang-cpu profile clean sglang-cpu sglang-cpu-releases \
	sglang-install sglang-install-kind harness-beside harness-install runner-matrix scenario-plan scenario-run \
	report pr-comment gate history-ingest history-report sweep-shards sweep-baseline sweep-shard sweep-merge

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

# Static checks: ruff over the Python trees, mypy over harness/ (its `files`), the committed JSON
# Schemas (scenarios/, docs/schemas/) against the models they are generated from, and the workflows:
# actionlint (expressions, runner labels: .github/actionlint.yaml) and zizmor (security: pins,
# permissions, injection; .github/zizmor.yml), offline: it asks no network (CI reaches registries only).
lint: $(STAMP)
	$(BIN)/ruff check sglang_spec_harness tests benchmarks scripts .ci/sglang-layout
	$(BIN)/mypy
	$(BIN)/python scripts/json_schemas.py --check
	$(BIN)/actionlint -config-file .github/actionlint.yaml .github/workflows/*.yml
	$(BIN)/zizmor --offline --config .github/zizmor.yml .github/workflows
	$(BIN)/python scripts/doc_workflows.py --check docs/gpu.md

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

# SGLANG_SPEC or SGLANG_PATH (below) install SGLang from there instead of the registry's 0.5.23.
sglang-cpu: $(RUN_STAMP)
	$(BIN)/python -m sglang_spec_harness.sglang_cpu.install --prefix $(SGLANG_CPU) $(SGLANG_CPU_SOURCE)

# Older SGLang releases' environments on top of it (sglang_spec_harness/sglang_cpu/releases.toml), each checked by
# importing its EAGLE worker: make sglang-cpu-releases RELEASES="0.5.12.post1 0.5.13"
RELEASES ?=
sglang-cpu-releases: $(RUN_STAMP)
	@test -n "$(RELEASES)" || { echo 'make sglang-cpu-releases: name them, e.g. RELEASES="0.5.12.post1 0.5.13"' >&2; exit 2; }
	$(BIN)/python -m sglang_spec_harness.sglang_cpu.install --prefix $(SGLANG_CPU) $(foreach r,$(RELEASES),--release $(r))

# ---- The steps of the GPU workflows (.github/workflows/gpu-*.yml), runnable on a CPU too (.ci/run) ----
# Where SGLang comes from, one of (default: the registry's sglang==0.5.23, what the scenarios pin):
#   SGLANG_REF=<git ref of $(SGLANG_REPO)>  SGLANG_SPEC=<pip spec>  SGLANG_PATH=<checkout, sdist folder, wheel, folder with a wheel>
SGLANG_REF ?=
SGLANG_SPEC ?=
SGLANG_PATH ?=
# where SGLANG_REF is fetched from and into (a fork, or a local repository: .ci/run)
SGLANG_REPO ?= https://github.com/sgl-project/sglang.git
SGLANG_SRC ?= .sglang-src
# gpu: SGLang as SGLang's own CI installs it when the checkout has its CI install script
# (scripts/ci/cuda/ci_install_dependency.sh: run from the checkout's root; then, in a later step,
# `make harness-beside`), else SGLang and the harness into $(VENV) by scripts/install_sglang_gpu.sh
# (scripts/sglang_install.sh decides; SGLANG_INSTALL=auto|sglang-ci|harness); cpu: into $(SGLANG_CPU)
# as `make sglang-cpu` builds it (SGLang's code from the source given, the pinned CPU dependencies around it).
SGLANG_DEVICE ?= gpu
SGLANG_INSTALL ?= auto
SGLANG_CPU_SOURCE = $(if $(SGLANG_PATH),--sglang '$(SGLANG_PATH)',$(if $(SGLANG_SPEC),--sglang '$(SGLANG_SPEC)'))

sglang-install:
ifeq ($(SGLANG_DEVICE),cpu)
ifneq ($(SGLANG_REF),)
	scripts/fetch_sglang_ref.sh '$(SGLANG_REPO)' '$(SGLANG_REF)' '$(SGLANG_SRC)'
	$(MAKE) sglang-cpu SGLANG_PATH='$(SGLANG_SRC)'
else
	$(MAKE) sglang-cpu SGLANG_SPEC='$(SGLANG_SPEC)' SGLANG_PATH='$(SGLANG_PATH)'
endif
else
	PYTHON="$(PYTHON)" VENV="$(VENV)" SGLANG_REF="$(SGLANG_REF)" SGLANG_SPEC="$(SGLANG_SPEC)" SGLANG_PATH="$(SGLANG_PATH)" \
	  SGLANG_REPO="$(SGLANG_REPO)" SGLANG_SRC="$(SGLANG_SRC)" SGLANG_INSTALL="$(SGLANG_INSTALL)" \
	  scripts/sglang_install.sh
	if [ -x $(BIN)/harness ]; then touch $(RUN_STAMP); fi
endif

# How `make sglang-install` would install (one line: `sglang-ci SCRIPT`, `harness SCRIPT`, ...): a
# workflow reads it before the install (the harness's own needs a Python >= 3.11 set up first).
sglang-install-kind:
	@SGLANG_REF="$(SGLANG_REF)" SGLANG_SPEC="$(SGLANG_SPEC)" SGLANG_PATH="$(SGLANG_PATH)" SGLANG_SRC="$(SGLANG_SRC)" \
	  SGLANG_INSTALL="$(SGLANG_INSTALL)" scripts/sglang_install.sh --kind

# After SGLang's own CI install, in a later step (its PATH and VIRTUAL_ENV reach only later steps):
# the harness into $(VENV), made from SGLang's interpreter (SGLANG_PYTHON: python3 on PATH) with
# SGLang's site directories behind its own, SGLang's every distribution pinned; checked to leave
# SGLang's environment exactly as it was (scripts/install_harness_beside.py). Nothing to do after the
# harness's own install (it put both in $(VENV)).
SGLANG_PYTHON ?= python3
HARNESS_BESIDE_EXTRAS ?= micro,report,history,postgres
harness-beside:
	@if [ -f $(RUN_STAMP) ] && [ ! -f $(VENV)/.harness-beside ]; then \
	  echo "make harness-beside: $(VENV) already has SGLang and the harness (the harness's own install): nothing to do"; \
	else \
	  $(SGLANG_PYTHON) scripts/install_harness_beside.py --sglang-python "$$(command -v $(SGLANG_PYTHON))" \
	    --venv $(VENV) --extras $(HARNESS_BESIDE_EXTRAS) && touch $(VENV)/.harness-beside $(RUN_STAMP); \
	fi

# The harness alone, without torch: for the jobs that only read scenarios or run directories
# (the runner matrix, the history). HARNESS_EXTRAS: which extras.
HARNESS_EXTRAS ?= history,report,postgres
harness-install:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e "$(if $(HARNESS_EXTRAS),.[$(HARNESS_EXTRAS)],.)"

# The GitHub Actions matrix for SCENARIOS: a job per scenario and runner label, from each scenario's
# `hardware:` (RUNNERS="b200 h200": only those labels). One line of JSON.
SCENARIOS ?= $(SCENARIO)
RUNNERS ?=
runner-matrix:
	@$(BIN)/harness scenario-info --github-matrix $(SCENARIOS) $(foreach r,$(RUNNERS),--runner $(r))

# SCENARIO is a path in this repository, a shipped scenario's name, or `sglang:PATH`: a path in the
# SGLang checkout ($(SGLANG_SRC)), for a scenario that SGLang keeps with its own tests.
SCENARIO_FILE = $(if $(filter sglang:%,$(SCENARIO)),$(SGLANG_SRC)/$(patsubst sglang:%,%,$(SCENARIO)),$(SCENARIO))
# SET_FILE: `--set PATH=VALUE` overrides, one per line (blank lines and # comments skipped), passed
# as arguments of their own: a value never reaches a shell as code.
SET_FILE ?=
define with_sets
set --; if [ -n "$(SET_FILE)" ]; then while IFS= read -r line || [ -n "$$line" ]; do \
  case "$$line" in ''|'#'*) ;; *) set -- "$$@" --set "$$line" ;; esac; done < "$(SET_FILE)"; fi;
endef

# The run's plan, without starting anything (harness run --dry-run): the scenario, SET_FILE and
# RUN_ARGS checked in seconds, before a job waits for a GPU runner. Needs only the core harness.
scenario-plan:
	@$(with_sets) $(BIN)/harness run $(SCENARIO_FILE) --dry-run $(RUN_ARGS) "$$@"

# One run of SCENARIO into RUNS ($(RUNS)/latest is the newest, or reports/latest for reports/runs).
# The verdict's exit code (0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 bad input, 130 interrupted) goes into
# RUN_STATUS, since make itself can only say 2: a workflow publishes the run first, then gates on it.
RUNS ?= reports/runs
RUN_STATUS ?= reports/run-exit-code
scenario-run: $(RUN_STAMP)
	@mkdir -p $(dir $(RUN_STATUS))
	@$(with_sets) $(BIN)/harness run $(SCENARIO_FILE) --out $(RUNS) --no-progress $(RUN_ARGS) "$$@"; status=$$?; \
	echo $$status > $(RUN_STATUS); echo "make scenario-run: harness run exited $$status (in $(RUN_STATUS))"; exit $$status

# Rebuild the report of RUN_DIR (index.html, junit.xml, summary.md); in a workflow, also the job summary.
RUN_DIR ?= $(if $(filter runs,$(notdir $(RUNS))),$(dir $(RUNS))latest,$(RUNS)/latest)
report:
	$(BIN)/harness report $(RUN_DIR) --step-summary

# The pull request's comment of RUN_DIR into PR_COMMENT: the rule table, the TPOT line, a link to
# the report ($$REPORT_URL, when set), a hidden marker naming it ($$COMMENT_KEY, default the scenario)
# that a workflow finds its last comment by. Both come from the environment, never parsed by a shell.
PR_COMMENT ?= reports/pr-comment.md
pr-comment:
	$(BIN)/harness report $(RUN_DIR) --pr-comment $(PR_COMMENT) $${COMMENT_KEY:+--comment-key "$$COMMENT_KEY"} \
	  $${REPORT_URL:+--report-url "$$REPORT_URL"}

# What the job does with RUN_DIR's verdict (harness gate): GATE=pr (timing INCONCLUSIVE warns, not run
# is a notice) or nightly (both fail); in both, FAIL and an exact rule without a verdict fail. Exit 0 or
# 1 (make: 2), one line per rule.
GATE ?= pr
gate:
	$(BIN)/harness gate $(RUN_DIR) --mode $(GATE)

# The history database: HISTORY_DB (a SQLite file or postgresql://...; default $$HARNESS_HISTORY_DB,
# else reports/history.sqlite). Ingest every run under RUNS; then change points and the trend page.
HISTORY_DB ?=
HISTORY_OUT ?= reports/history
MAX_REGRESSION ?= 0.05
history-ingest:
	$(BIN)/harness history ingest $(RUNS) $(if $(HISTORY_DB),--db $(HISTORY_DB))

history-report:
	@$(BIN)/harness history report --out $(HISTORY_OUT) --max-regression $(MAX_REGRESSION) $(if $(HISTORY_DB),--db $(HISTORY_DB)); \
	status=$$?; echo $$status > $(HISTORY_OUT).exit-code; exit $$status

# ---- A release sweep spread over runners (.github/workflows/gpu-release-sweep.yml; docs/history.md) ----
# `make sweep-baseline` on one runner, then `make sweep-shard SHARD=I/N` on each (beside the baseline
# step's folder), then `make sweep-merge` where the shards' folders are: SCENARIO over SWEEP_RELEASES
# (A..B), the folders in SWEEP_OUT, the merged sweep in SWEEP_MERGED (into HISTORY_DB, default as
# `harness history`), each command's exit code in SWEEP_STATUS (make itself can only say 2).
SWEEP_RELEASES ?=
SWEEP_SHARDS ?= 2
SWEEP_ENVIRONMENTS ?= target
SWEEP_OUT ?= reports/sweeps
SWEEP_MERGED ?= reports/sweep
SWEEP_STATUS ?= reports/sweep-exit-code
SWEEP_BASELINE ?= $(wildcard $(SWEEP_OUT)/*-baseline)
SWEEP_ARGS ?=
MERGE_ARGS ?=
SHARD ?=
SWEEP_POINTS = '$(SCENARIO)' --sglang-releases '$(SWEEP_RELEASES)' --environments $(SWEEP_ENVIRONMENTS) --out '$(SWEEP_OUT)'
KEEP_STATUS = status=$$?; echo $$status > $(SWEEP_STATUS); exit $$status

# The matrix of SWEEP_SHARDS shards: one line of JSON, [{"shard": "1/2", "name": "1-of-2"}, ...].
sweep-shards:
	@$(PYTHON) -c 'import json, sys; n = int(sys.argv[1]); print(json.dumps([{"shard": f"{i}/{n}", "name": f"{i}-of-{n}"} for i in range(1, n + 1)]))' '$(SWEEP_SHARDS)'

sweep-baseline: $(RUN_STAMP)
	@mkdir -p $(dir $(SWEEP_STATUS))
	@$(BIN)/harness sweep baseline $(SWEEP_POINTS) $(SWEEP_ARGS); $(KEEP_STATUS)

sweep-shard: $(RUN_STAMP)
	@test $(words $(SWEEP_BASELINE)) -eq 1 || { echo "make sweep-shard: expected one *-baseline folder in $(SWEEP_OUT), found $(words $(SWEEP_BASELINE)) (or give SWEEP_BASELINE=FOLDER)" >&2; exit 2; }
	@mkdir -p $(dir $(SWEEP_STATUS))
	@$(BIN)/harness sweep $(SWEEP_POINTS) --shard '$(SHARD)' --baseline-from '$(SWEEP_BASELINE)' $(SWEEP_ARGS); $(KEEP_STATUS)

sweep-merge:
	@mkdir -p $(dir $(SWEEP_STATUS))
	@$(BIN)/harness sweep merge $(wildcard $(SWEEP_OUT)/*-shard-*) --out '$(SWEEP_MERGED)' $(if $(HISTORY_DB),--db '$(HISTORY_DB)') $(MERGE_ARGS); $(KEEP_STATUS)

clean:
	rm -rf $(VENV) $(SGLANG_CPU) .sglang-src .pytest_cache
