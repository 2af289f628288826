"""Run jobs of a GitHub Actions workflow on this machine, step by step, as a runner would: what .ci/run
uses to run the GPU workflow's own steps, in their order, with their inputs, on a CPU.

    python scripts/run_workflow_job.py .github/workflows/gpu-regression.yml --job plan --job regression \\
        --input runs_on='["1-gpu-h100"]' --repo OWNER/NAME=LOCAL_GIT_REPO --workspace DIR --python PATH

What it does as Actions does: each job in a workspace of its own (DIR/JOB); the workflow's, job's and
step's `env:` and `with:` with their `${{ }}` expressions evaluated (inputs with the workflow_call
defaults, github, env, secrets, steps, needs, runner, matrix-free); `if:` (default success()); `run:`
with `bash -e` in the workspace, with GITHUB_ENV, GITHUB_PATH, GITHUB_OUTPUT and GITHUB_STEP_SUMMARY
read back between steps; `timeout-minutes` and `continue-on-error`; job outputs for the next job's
`needs`. What it stands in for, because this machine reaches package registries only:
- actions/checkout: a clone of the local repository given for that owner/name (--repo), at the ref;
- actions/setup-python: --python (an interpreter >= 3.11) first on PATH as python and python3;
- actions/upload-artifact and download-artifact: a folder per artifact under DIR/artifacts; the
  upload's artifact-url output is https://artifacts.invalid/NAME (no such host: a link to nowhere).
Anything else (another action, a `shell:`, an expression it does not know) stops it with one line
naming the step: a workflow change it cannot run fails CI loudly instead of being skipped.
It prints each step with its time, and writes them all to DIR/steps.json. Exit: 0 when every job
succeeded, 1 when one failed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||<=|>=|[!<>()\[\].,])"
                   r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")


class WorkflowError(Exception):
    """Something this runner cannot do, or bad input: one line."""


# ---- expressions ---------------------------------------------------------------------------------


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise WorkflowError(f"expression {text.strip()!r}: cannot read it at {text[pos:]!r}")
        kind = next(k for k, v in m.groupdict().items() if v is not None)
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def _text(value: Any) -> str:
    """A value as Actions writes it into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, indent=2)
    return str(value)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()  # Actions compares strings ignoring case
    if (isinstance(a, (int, float)) and isinstance(b, str)) or (isinstance(a, str) and isinstance(b, (int, float))):
        try:
            return float(a) == float(b)
        except ValueError:
            return False
    return a == b


FUNCTIONS = {
    "startswith": lambda s, p: _text(s).lower().startswith(_text(p).lower()),
    "endswith": lambda s, p: _text(s).lower().endswith(_text(p).lower()),
    "contains": lambda s, p: (any(_equal(x, p) for x in s) if isinstance(s, list) else _text(p).lower() in _text(s).lower()),
    "fromjson": lambda s: json.loads(s),
    "tojson": lambda v: json.dumps(v, indent=2),
    "format": lambda f, *a: re.sub(r"\{(\d+)\}", lambda m: _text(a[int(m.group(1))]), f),
    "join": lambda v, sep=",": _text(sep).join(_text(x) for x in (v if isinstance(v, list) else [v])),
}
STATUS_FUNCTIONS = ("always", "success", "failure", "cancelled")


class _Parser:
    """A recursive-descent reader of one `${{ }}` expression against `contexts`."""

    def __init__(self, text: str, contexts: dict[str, Any], status: dict[str, bool]):
        self.text, self.tokens, self.pos = text, _tokens(text), 0
        self.contexts, self.status = contexts, status

    def parse(self) -> Any:
        value = self._or()
        if self.pos != len(self.tokens):
            raise WorkflowError(f"expression {self.text.strip()!r}: unexpected {self.tokens[self.pos][1]!r}")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def _take(self, want: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens) or (want is not None and self.tokens[self.pos][1] != want):
            raise WorkflowError(f"expression {self.text.strip()!r}: expected {want or 'more'}")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            left = left if _truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._compare()
        while self._peek() == "&&":
            self._take()
            right = self._compare()
            left = right if _truthy(left) else left
        return left

    def _compare(self) -> Any:
        left = self._unary()
        while self._peek() in ("==", "!="):
            op = self._take()[1]
            right = self._unary()
            left = _equal(left, right) if op == "==" else not _equal(left, right)
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not _truthy(self._unary())
        return self._postfix(self._primary())

    def _primary(self) -> Any:
        kind, value = self._take()
        if value == "(":
            inner = self._or()
            self._take(")")
            return inner
        if kind == "num":
            return float(value) if "." in value else int(value)
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind != "name":
            raise WorkflowError(f"expression {self.text.strip()!r}: unexpected {value!r}")
        if value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        if self._peek() == "(":
            return self._call(value.lower())
        if value not in self.contexts:
            raise WorkflowError(f"expression {self.text.strip()!r}: no context {value!r} here")
        return self.contexts[value]

    def _call(self, name: str) -> Any:
        self._take("(")
        args = []
        while self._peek() != ")":
            args.append(self._or())
            if self._peek() == ",":
                self._take()
        self._take(")")
        if name in STATUS_FUNCTIONS:
            return {"always": True, "success": not self.status["failed"], "failure": self.status["failed"],
                    "cancelled": False}[name]
        if name not in FUNCTIONS:
            raise WorkflowError(f"expression {self.text.strip()!r}: function {name}() is not one this runner knows")
        return FUNCTIONS[name](*args)

    def _postfix(self, value: Any) -> Any:
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                key: Any = self._take()[1]
            else:
                key = self._or()
                self._take("]")
            if isinstance(value, dict):
                value = value.get(key, value.get(str(key).lower()))
            elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
                value = value[key]
            else:
                value = None
        return value


def evaluate(text: str, contexts: dict[str, Any], status: dict[str, bool] | None = None) -> Any:
    return _Parser(text, contexts, status or {"failed": False}).parse()


def interpolate(value: Any, contexts: dict[str, Any], status: dict[str, bool] | None = None) -> Any:
    """`${{ }}` in a string: a string made only of one expression keeps the expression's value."""
    if not isinstance(value, str):
        return value
    whole = EXPRESSION.fullmatch(value.strip())
    if whole:
        return evaluate(whole.group(1), contexts, status)
    return EXPRESSION.sub(lambda m: _text(evaluate(m.group(1), contexts, status)), value)


def condition(value: Any, contexts: dict[str, Any], status: dict[str, bool]) -> bool:
    """An `if:`: a bare expression (or one in `${{ }}`); a status function is implied: success()."""
    if value is None:
        return not status["failed"]
    text = value.strip() if isinstance(value, str) else _text(value)
    if m := EXPRESSION.fullmatch(text):
        text = m.group(1)
    if not re.search(r"\b(always|success|failure|cancelled)\s*\(", text):
        text = f"success() && ({text})"
    return _truthy(evaluate(text, contexts, status))


# ---- the runner ----------------------------------------------------------------------------------


@dataclass
class Job:
    name: str
    workspace: Path
    env: dict[str, str]
    path: list[str] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # step id -> outputs
    failed: bool = False


def read_env_file(path: Path) -> dict[str, str]:
    """GITHUB_ENV / GITHUB_OUTPUT: NAME=VALUE lines and NAME<<DELIMITER blocks."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


@dataclass
class Runner:
    workflow: dict[str, Any]
    root: Path
    inputs: dict[str, Any]
    repos: dict[str, Path]
    python: Path | None
    secrets: dict[str, str]
    github: dict[str, Any]
    needs: dict[str, Any] = field(default_factory=dict)
    timings: list[dict[str, Any]] = field(default_factory=list)

    def contexts(self, job: Job) -> dict[str, Any]:
        return {"inputs": self.inputs, "github": self.github, "secrets": self.secrets, "env": dict(job.env),
                "needs": self.needs, "steps": {k: {"outputs": v} for k, v in job.outputs.items()},
                "runner": {"temp": str(self.root / "runner-temp"), "os": "Linux"}, "vars": {}}

    def run_job(self, name: str) -> bool:
        spec = self.workflow["jobs"].get(name)
        if spec is None:
            raise WorkflowError(f"no job {name!r} in the workflow")
        if "uses" in spec or "strategy" in spec:
            raise WorkflowError(f"job {name}: a called workflow or a matrix: not something this runner runs")
        workspace = self.root / name
        shutil.rmtree(workspace, ignore_errors=True)
        workspace.mkdir(parents=True)
        job = Job(name, workspace, env={})
        status = {"failed": False}
        contexts = self.contexts(job)
        if not condition(spec.get("if"), contexts, {"failed": any(n["result"] != "success" for n in self.needs.values())}):
            print(f"== job {name}: skipped (if: {spec.get('if')})", flush=True)
            self.needs[name] = {"result": "skipped", "outputs": {}}
            return True
        runs_on = interpolate(spec.get("runs-on"), contexts)
        print(f"== job {name}: runs-on {json.dumps(runs_on)} (here, emulated)", flush=True)
        for scope in (self.workflow.get("env") or {}, spec.get("env") or {}):
            job.env.update({k: _text(interpolate(v, self.contexts(job))) for k, v in scope.items()})
        for index, step in enumerate(spec.get("steps") or []):
            self.run_step(job, index, step, status)
        outputs = {k: _text(interpolate(v, self.contexts(job))) for k, v in (spec.get("outputs") or {}).items()}
        self.needs[name] = {"result": "failure" if job.failed else "success", "outputs": outputs}
        return not job.failed

    def run_step(self, job: Job, index: int, step: dict[str, Any], status: dict[str, bool]) -> None:
        contexts = self.contexts(job)
        label = _text(interpolate(step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0], contexts))
        status["failed"] = job.failed
        if not condition(step.get("if"), contexts, status):
            print(f"-- {job.name}: {label}: skipped", flush=True)
            self.timings.append({"job": job.name, "step": label, "outcome": "skipped", "seconds": 0.0})
            return
        env = {**job.env, **{k: _text(interpolate(v, contexts)) for k, v in (step.get("env") or {}).items()}}
        minutes = interpolate(step.get("timeout-minutes"), contexts)
        if minutes is None:
            raise WorkflowError(f"job {job.name}, step {label!r}: no timeout-minutes")
        started = time.monotonic()
        print(f"-- {job.name}: {label} (timeout {minutes} min)", flush=True)
        if "uses" in step:
            ok = self.run_action(job, step, {k: interpolate(v, contexts) for k, v in (step.get("with") or {}).items()},
                                 step.get("id"))
        else:
            ok = self.run_shell(job, step, env, float(minutes) * 60)
        seconds = round(time.monotonic() - started, 1)
        outcome = "success" if ok else "failure"
        print(f"-- {job.name}: {label}: {outcome} in {seconds} s", flush=True)
        self.timings.append({"job": job.name, "step": label, "outcome": outcome, "seconds": seconds})
        if not ok and not _truthy(interpolate(step.get("continue-on-error", False), contexts)):
            job.failed = True

    def run_shell(self, job: Job, step: dict[str, Any], env: dict[str, str], timeout_s: float) -> bool:
        if step.get("shell") not in (None, "bash"):
            raise WorkflowError(f"job {job.name}: shell {step.get('shell')!r}: only bash here")
        files = {name: job.workspace.parent / f".{job.name}-{name.lower()}" for name in
                 ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT")}
        for path in files.values():
            path.write_text("")
        script = job.workspace.parent / f".{job.name}-step.sh"
        script.write_text(step["run"])
        base = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
        full = {**base, **env, **{k: str(v) for k, v in files.items()}, "GITHUB_ACTIONS": "true", "CI": "true",
                "GITHUB_WORKSPACE": str(job.workspace), "GITHUB_STEP_SUMMARY": str(self.root / "step-summary.md"),
                "GITHUB_RUN_ID": str(self.github["run_id"]), "GITHUB_RUN_ATTEMPT": str(self.github["run_attempt"]),
                "GITHUB_REPOSITORY": str(self.github["repository"]), "RUNNER_TEMP": str(self.root / "runner-temp"),
                "PATH": os.pathsep.join([*job.path, base.get("PATH", "")])}
        cwd = job.workspace / step.get("working-directory", ".")
        proc = subprocess.Popen(["bash", "-e", str(script)], cwd=cwd, env=full, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print(f"   timed out after {timeout_s / 60:g} min", flush=True)
            code = 124
        job.env.update(read_env_file(files["GITHUB_ENV"]))
        job.path = [line for line in files["GITHUB_PATH"].read_text().splitlines()[::-1] if line] + job.path
        if step.get("id"):
            job.outputs[step["id"]] = read_env_file(files["GITHUB_OUTPUT"])
        return code == 0

    def run_action(self, job: Job, step: dict[str, Any], given: dict[str, Any], step_id: str | None) -> bool:
        action = step["uses"].split("@")[0]
        if action == "actions/checkout":
            return self.checkout(job, given)
        if action == "actions/setup-python":
            if self.python is None:
                raise WorkflowError("actions/setup-python: give --python")
            shim = self.root / "setup-python" / "bin"
            shim.mkdir(parents=True, exist_ok=True)
            for name in ("python", "python3"):
                (shim / name).unlink(missing_ok=True)
                (shim / name).symlink_to(self.python)
            job.path.insert(0, str(shim))
            return True
        if action in ("actions/upload-artifact", "actions/download-artifact"):
            return self.artifact(job, action, given, step_id)
        raise WorkflowError(f"job {job.name}: action {step['uses']!r}: not one this runner stands in for")

    def checkout(self, job: Job, given: dict[str, Any]) -> bool:
        repository = _text(given.get("repository")) or self.github["repository"]
        source = self.repos.get(repository)
        if source is None:
            raise WorkflowError(f"actions/checkout of {repository}: give --repo {repository}=LOCAL_GIT_REPOSITORY")
        target = job.workspace / _text(given.get("path") or ".")
        # no ref: the commit the local repository is at (a runner gets the triggering commit)
        ref = _text(given.get("ref")) or subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], check=True,
                                                        capture_output=True, text=True).stdout.strip()
        if target == job.workspace:  # the workspace itself: empty it first, as a clean checkout does
            for child in target.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        else:
            shutil.rmtree(target, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(source), str(target)], check=True)
        subprocess.run(["git", "-C", str(target), "checkout", "-q", "--detach", ref], check=True)
        print(f"   {repository}@{ref} -> {target}", flush=True)
        return True

    def artifact(self, job: Job, action: str, given: dict[str, Any], step_id: str | None) -> bool:
        name = _text(given.get("name"))
        if not name or re.search(r'[":<>|*?\\/\r\n]', name):
            raise WorkflowError(f"{action}: not an artifact name: {name!r}")
        store = self.root / "artifacts" / name
        if action == "actions/upload-artifact":
            paths = [p for p in _text(given.get("path")).splitlines() if p.strip()]
            found = [job.workspace / p.strip() for p in paths if (job.workspace / p.strip()).exists()]
            shutil.rmtree(store, ignore_errors=True)
            store.mkdir(parents=True)
            # as upload-artifact lays it out: each path below the paths' least common ancestor
            common = Path(os.path.commonpath(found)) if found else job.workspace
            if len(found) == 1 and found[0].is_file():
                common = found[0].parent
            for path in found:
                if path.is_dir():
                    shutil.copytree(path, store / path.relative_to(common), symlinks=True, dirs_exist_ok=True)
                else:
                    (store / path.relative_to(common)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, store / path.relative_to(common))
            if step_id:
                job.outputs[step_id] = {"artifact-url": f"https://artifacts.invalid/{name}", "artifact-id": name}
            print(f"   artifact {name}: {len(found)} of {len(paths)} path(s)", flush=True)
            return True
        if not store.is_dir():
            print(f"   no artifact {name}", flush=True)
            return False
        shutil.copytree(store, job.workspace / _text(given.get("path") or "."), dirs_exist_ok=True, symlinks=True)
        return True


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for value in values:
        if "=" not in value:
            raise WorkflowError(f"--{what} {value!r}: expected NAME=VALUE")
        name, text = value.split("=", 1)
        out[name] = text
    return out


def workflow_inputs(workflow: dict[str, Any], given: dict[str, str]) -> dict[str, Any]:
    """workflow_call's inputs with their defaults and types (number, boolean), and those given."""
    on = workflow.get("on", workflow.get(True)) or {}
    declared = (on.get("workflow_call") or {}).get("inputs") or {}
    unknown = set(given) - set(declared)
    if unknown:
        raise WorkflowError(f"--input {', '.join(sorted(unknown))}: not an input of the workflow")
    out: dict[str, Any] = {}
    for name, spec in declared.items():
        if name not in given and spec.get("required"):
            raise WorkflowError(f"input {name} is required")
        value: Any = given.get(name, spec.get("default", ""))
        if spec.get("type") == "number":
            value = float(value) if "." in str(value) else int(value)
        elif spec.get("type") == "boolean":
            value = value if isinstance(value, bool) else str(value).lower() == "true"
        out[name] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_workflow_job.py", description=__doc__.splitlines()[0])
    parser.add_argument("workflow", type=Path)
    parser.add_argument("--job", action="append", required=True, help="a job to run, in this order (repeatable)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--secret", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=PATH",
                        help="the local git repository actions/checkout clones for OWNER/NAME")
    parser.add_argument("--repository", default="local/harness", help="github.repository (default local/harness)")
    parser.add_argument("--workspace", type=Path, required=True, help="where the jobs' workspaces and artifacts go")
    parser.add_argument("--python", type=Path, help="the interpreter actions/setup-python stands for")
    args = parser.parse_args(argv)
    try:
        workflow = yaml.safe_load(args.workflow.read_text())
        repos = {k: Path(v).resolve() for k, v in _pairs(args.repo, "repo").items()}
        root = args.workspace.resolve()
        root.mkdir(parents=True, exist_ok=True)
        (root / "runner-temp").mkdir(exist_ok=True)
        github = {"repository": args.repository, "run_id": int(time.time()), "run_attempt": 1, "event_name": "workflow_call",
                  "event": {}, "ref": "refs/heads/local", "workspace": str(root), "token": ""}
        runner = Runner(workflow, root, workflow_inputs(workflow, _pairs(args.input, "input")), repos,
                        args.python.resolve() if args.python else None, _pairs(args.secret, "secret"), github)
        ok = True
        for name in args.job:
            ok = runner.run_job(name) and ok
    except (WorkflowError, OSError, ValueError, yaml.YAMLError, subprocess.CalledProcessError) as exc:
        print(f"run_workflow_job: {exc}", file=sys.stderr)
        return 2
    finally:
        if "runner" in locals():
            (root / "steps.json").write_text(json.dumps(runner.timings, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
