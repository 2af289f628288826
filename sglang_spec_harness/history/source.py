"""The source at a point of a sweep, read as hostile data: where it is (a release's folder, a git
revision's tree), which of its files a trace's frame names, each function's source located with
`ast`, and the unified diff of one function between two points.

- A release point: the folder its environment recorded (`sweep.environment.source_dir`: the
  release installed with `pip install --no-deps --target`, or the base environment's
  site-packages), SGLang's package in it only (`RELEASE_PACKAGES`).
- A git revision point: the repository and commit its environment recorded (`repository`,
  `commit`), read with `git ls-tree` and `git cat-file`; the whole tree is the code under test.

A file too large, not UTF-8 or not Python that parses gives a one-line note, never an exception.
"""

from __future__ import annotations

import ast
import difflib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sglang_spec_harness.rundir import as_object
from sglang_spec_harness.sglang_cpu import STAND_INS_DIR
from sglang_spec_harness.import_root import PACKAGE_DIR, PACKAGE_NAME

# The packages of a release's folder that are SGLang's own (the folder may be a whole site-packages).
RELEASE_PACKAGES = ("sglang",)
MAX_SOURCE_BYTES = 4 << 20  # SGLang's largest file is ~200 kB
GIT_TIMEOUT_S = 60
CONTEXT_LINES = 3
# The harness's own code as a frame names it: its package, and the stand-in packages it puts on sys.path.
HARNESS_PACKAGES = (PACKAGE_NAME, *sorted(p.name for p in STAND_INS_DIR.iterdir() if (p / "__init__.py").is_file()))


class SourceUnavailable(Exception):
    """One line: why a point's source cannot be read here."""


def is_harness_file(file: str) -> bool:
    """Whether a frame's file is the harness's own code (its package, or a stand-in it puts on
    sys.path), by the path as the trace names it or where it lies."""
    parts = PurePosixPath(file).parts
    if parts and parts[0] in HARNESS_PACKAGES:
        return True
    return file.startswith("/") and (Path(file).is_relative_to(PACKAGE_DIR) or Path(file).is_relative_to(STAND_INS_DIR))


class SourceTree:
    """The files of one point's source: `.py` paths (relative, `/`-separated) and their sizes."""

    label: str

    def sizes(self) -> dict[str, int]:
        raise NotImplementedError

    def read(self, path: str) -> bytes:
        raise NotImplementedError

    def __init__(self) -> None:
        self._by_tail: dict[tuple[str, ...], list[str]] | None = None

    def resolve(self, file: str) -> str | None:
        """The tree's path of a frame's file: the same path, else the one whose last components
        match it (a frame names a file from its sys.path entry on, a tree from its root: `planted/x.py`
        is `python/planted/x.py`; an absolute path ends in a tree path). At least two components must
        match (a bare `contextlib.py` is nobody's), and the match must be the only one."""
        sizes = self.sizes()
        if file in sizes:
            return file
        parts = PurePosixPath(file).parts
        if len(parts) < 2:
            return None
        if self._by_tail is None:
            self._by_tail = {}
            for path in sizes:
                tail = PurePosixPath(path).parts[-2:]
                self._by_tail.setdefault(tail, []).append(path)
        found = [p for p in self._by_tail.get(parts[-2:], []) if _suffix_of(PurePosixPath(p).parts, parts)]
        return found[0] if len(found) == 1 else None

    def same_name(self, path: str) -> list[str]:
        """Files of the tree with the same file name (where a moved file may have gone)."""
        name = PurePosixPath(path).name
        return sorted(p for p in self.sizes() if PurePosixPath(p).name == name and p != path)


def _suffix_of(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One path's components end the other's."""
    n = min(len(a), len(b))
    return a[-n:] == b[-n:]


class FolderTree(SourceTree):
    def __init__(self, root: Path, packages: tuple[str, ...], label: str):
        super().__init__()
        self.root, self.packages, self.label = root, packages, label
        self._sizes: dict[str, int] | None = None

    def sizes(self) -> dict[str, int]:
        if self._sizes is None:
            self._sizes = dict(self._walk())
        return self._sizes

    def _walk(self) -> Iterator[tuple[str, int]]:
        for package in self.packages:
            for folder, dirs, files in os.walk(self.root / package):  # links are not followed into
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for name in files:
                    path = Path(folder) / name
                    if name.endswith(".py") and not path.is_symlink() and path.is_file():
                        yield path.relative_to(self.root).as_posix(), path.stat().st_size

    def read(self, path: str) -> bytes:
        with open(self.root / path, "rb") as f:
            return f.read(MAX_SOURCE_BYTES + 1)


class GitTree(SourceTree):
    def __init__(self, repository: Path, commit: str, label: str):
        super().__init__()
        self.repository, self.commit, self.label = repository, commit, label
        self._sizes: dict[str, int] | None = None

    def _git(self, *args: str) -> bytes:
        try:
            done = subprocess.run(["git", "-C", str(self.repository), *args], capture_output=True, check=False,
                                  timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SourceUnavailable(f"git {args[0]} in {self.repository}: {exc}") from None
        if done.returncode != 0:
            last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
            raise SourceUnavailable(f"git {args[0]} {self.commit[:12]} in {self.repository}: {last}")
        return done.stdout

    def sizes(self) -> dict[str, int]:
        if self._sizes is None:
            sizes = {}
            for entry in self._git("ls-tree", "-r", "-l", "-z", "--end-of-options", self.commit).split(b"\0"):
                meta, _, name = entry.partition(b"\t")
                fields = meta.split()
                path = name.decode("utf-8", "surrogateescape")
                if len(fields) == 4 and fields[1] == b"blob" and path.endswith(".py") and fields[3].isdigit():
                    sizes[path] = int(fields[3])
            self._sizes = sizes
        return self._sizes

    def read(self, path: str) -> bytes:
        return self._git("cat-file", "blob", f"{self.commit}:{path}")


def _source_dir(text: Any) -> Path | None:
    """The folder of `source_dir` (`/path`, or `/path (the base venv's own)`)."""
    if not isinstance(text, str) or not text:
        return None
    for candidate in (text, text.split(" (", 1)[0]):
        if Path(candidate).is_dir():
            return Path(candidate)
    return None


def tree_of(run_json: dict[str, Any], label: str) -> SourceTree:
    """The source of a sweep point's run, from its run.json `sweep.environment`; SourceUnavailable
    when the run is no sweep point or its source is not here."""
    sweep = as_object(run_json.get("sweep"))
    environment = as_object(sweep.get("environment"))
    if not sweep:
        raise SourceUnavailable(f"{label}: not a sweep point, so which source ran is not recorded")
    if sweep.get("axis") == "git_revision":
        repository, commit = environment.get("repository"), environment.get("commit") or sweep.get("point")
        if not isinstance(repository, str) or not isinstance(commit, str):
            raise SourceUnavailable(f"{label}: its sweep point records no repository")
        if not Path(repository).is_dir():
            raise SourceUnavailable(f"{label}: the repository {repository} is not here")
        return GitTree(Path(repository), commit, f"{commit[:12]} of {repository}")
    folder = _source_dir(environment.get("source_dir"))
    if folder is None:
        raise SourceUnavailable(f"{label}: its source folder {environment.get('source_dir')!r} is not here")
    return FolderTree(folder, RELEASE_PACKAGES, f"{label} in {folder}")


# ---- functions in a file -----------------------------------------------------------------------


@dataclass(frozen=True)
class Definition:
    qualname: str  # `Class.method`, `outer.<locals>.inner`, as Python's __qualname__
    name: str
    first_line: int  # the first decorator's line, else the def's (a code object's co_firstlineno)
    last_line: int
    shape: str  # ast.dump of the node: equal when only whitespace or comments differ


@dataclass
class ParsedFile:
    path: str
    lines: list[str] = field(default_factory=list)
    definitions: list[Definition] = field(default_factory=list)
    note: str | None = None  # why it could not be read (then no definitions)

    def segment(self, d: Definition) -> list[str]:
        return self.lines[d.first_line - 1:d.last_line]

    def find(self, name: str, line: int) -> Definition | None:
        """The function a frame names: by name and first line (the def's own line where a
        decorator's differs), else the only one of that name."""
        named = [d for d in self.definitions if d.name == name]
        exact = [d for d in named if d.first_line == line] or [d for d in named if d.first_line <= line <= d.last_line]
        return exact[0] if exact else named[0] if len(named) == 1 else None

    def by_qualname(self, qualname: str) -> Definition | None:
        return next((d for d in self.definitions if d.qualname == qualname), None)


def parse_source(path: str, data: bytes, size: int | None = None) -> ParsedFile:
    """A file's functions; a one-line note instead for a file too large, not UTF-8, or that does
    not parse."""
    size = len(data) if size is None else size
    if size > MAX_SOURCE_BYTES:
        return ParsedFile(path, note=f"{path}: {size} bytes, over the {MAX_SOURCE_BYTES} bytes read: not compared")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ParsedFile(path, note=f"{path}: not UTF-8 (byte {exc.start}): not compared")
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return ParsedFile(path, note=f"{path}: does not parse (line {exc.lineno}: {exc.msg}): not compared")
    except (ValueError, RecursionError, MemoryError) as exc:
        return ParsedFile(path, note=f"{path}: does not parse ({type(exc).__name__}): not compared")
    definitions: list[Definition] = []
    try:
        _collect(tree, "", definitions)
    except RecursionError:
        return ParsedFile(path, note=f"{path}: nested too deeply to compare")
    return ParsedFile(path, text.splitlines(), definitions)


def _collect(node: ast.AST, prefix: str, out: list[Definition]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qualname = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                out.append(Definition(qualname, child.name, first, child.end_lineno or child.lineno, ast.dump(child)))
            inner = f"{qualname}." if isinstance(child, ast.ClassDef) else f"{qualname}.<locals>."
            _collect(child, inner, out)
        else:
            _collect(child, prefix, out)


# ---- a function's diff -------------------------------------------------------------------------


@dataclass(frozen=True)
class Hunk:
    text: str  # unified diff with the files' own line numbers on both sides
    added: int
    removed: int
    lines_left_out: int  # lines of the diff past `max_lines`


def function_diff(before: list[str], after: list[str], first_before: int, first_after: int,
                  names: tuple[str, str], max_lines: int) -> Hunk:
    """The unified diff of one function's source at two points (its lines, and the line each starts
    at in its file, so that the hunk headers give the files' line numbers), at most `max_lines` lines
    of it. A side without the function is empty (first line 0)."""
    lines = [f"--- {names[0]}", f"+++ {names[1]}"]
    added = removed = 0
    header = _def_line(after or before)
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        # as git does, the function's `def` line after a hunk that starts below it
        context = f" {header}" if header and min(i1, j1) > 0 else ""
        lines.append(f"@@ -{_range(first_before + i1, i2 - i1)} +{_range(first_after + j1, j2 - j1)} @@{context}")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [f" {line}" for line in before[a1:a2]]
                continue
            lines += [f"-{line}" for line in before[a1:a2]]
            lines += [f"+{line}" for line in after[b1:b2]]
            removed += a2 - a1
            added += b2 - b1
    left_out = max(0, len(lines) - max_lines)
    return Hunk("\n".join(lines[:max_lines]), added, removed, left_out)


def _def_line(segment: list[str]) -> str:
    """A function's `def` line (its segment may start with decorators), at most 80 characters."""
    line = next((text.strip() for text in segment if text.lstrip().startswith(("def ", "async def "))), "")
    return line if len(line) <= 80 else line[:79] + "…"


def _range(start: int, length: int) -> str:
    """A hunk header's range as `diff -u` writes it: `start,length`; an empty side starts a line before."""
    if length == 0:
        return f"{max(start - 1, 0)},0"
    return str(start) if length == 1 else f"{start},{length}"
