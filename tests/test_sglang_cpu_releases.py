"""SGLang releases on this CPU: the release table, the version-aware shims and the per-release environments.

sglang_spec_harness/sglang_cpu/releases.toml says, per release, which dependency set and which adaptations
(sglang_spec_harness/sglang_cpu/port.py) it gets; the shims read the release on the path from its distribution
metadata and apply them; `sglang_spec_harness.sglang_cpu.releases.prepare` builds and caches an environment per
release. The fast tests need no SGLang: the shims run in a child interpreter against a fake `sglang`
distribution (a dist-info folder and the few modules an adaptation hooks). The tests marked
`real_sglang` prepare a real old release (they need `make sglang-cpu`) and run its own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglang_spec_harness.engines import HARNESS_SOURCE_ROOT
from sglang_spec_harness.sglang_cpu import SGLANG_VERSION, port
from sglang_spec_harness.sglang_cpu.base import is_current
from sglang_spec_harness.sglang_cpu.release_table import TableError, UnknownRelease, load_table, parse_table, release_key
from sglang_spec_harness.errors import HarnessInputError
from sglang_spec_harness.releases.environments import ReleaseUnavailable
from sglang_spec_harness.releases.versions import releases_in_range, sort_releases
from sglang_spec_harness.sglang_cpu.releases import prepare

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / ".sglang-cpu"
# pip index versions sglang, 0.5.9 .. 0.5.24rc0 (with the pre-releases it lists)
REGISTRY = ["0.5.9", "0.5.10rc0", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13",
            "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20",
            "0.5.21", "0.5.22", "0.5.23", "0.5.24rc0"]
SWEEP = REGISTRY[2:-1]  # 0.5.10 .. 0.5.23: the releases the table must know


@pytest.fixture(scope="module")
def table():
    return load_table(known_kinds=port.KNOWN_KINDS)


# ---- the table ----------------------------------------------------------------------------------------


def test_every_release_of_the_sweep_has_a_row_with_known_adaptations(table):
    assert set(SWEEP) <= set(table.releases())
    for release in SWEEP:
        row = table.row(release)
        assert row.adaptations, release  # at least the backend choice
        assert all(a.kind in port.ADAPTATION_KINDS for a in row.adaptations), release
        assert row.dependency_set.name in table.dependency_sets
    # exactly one way to keep intel_amx per release
    for release in SWEEP:
        kinds = [a.kind for a in table.row(release).adaptations]
        assert kinds.count("platform_has_amx") + kinds.count("module_has_amx") == 1, release


def test_each_adaptation_has_the_arguments_its_kind_reads(table):
    needs = {"platform_has_amx": {"module"}, "module_has_amx": {"module"}, "sgl_kernel_submodules": {"submodules"},
             "attention_call_signature": {"decode", "extend"}, "triton_routes": {"kernels"}, "tree_ops": {"module"},
             "extend_cache_locs_helper": {"module"}, "draft_backends": {"module", "backend_module"},
             "verify_metadata": {"module"}, "cuda_synchronize_noop": {"module"}, "record_stream_noop": {"module"}}
    assert needs.keys() == port.ADAPTATION_KINDS.keys()
    for adaptation in table.adaptations.values():
        assert needs[adaptation.kind] <= adaptation.params.keys(), adaptation.name
        assert adaptation.what, adaptation.name
        if adaptation.kind == "triton_routes":
            assert set(adaptation.params["kernels"]) <= port.TRITON_ROUTES.keys(), adaptation.name


def test_attention_signatures_name_stand_in_parameters_and_leave_only_defaulted_ones_out(table):
    pytest.importorskip("torch")
    import inspect

    sys.path.insert(0, str(REPO / "sglang_spec_harness" / "sglang_cpu" / "stand_ins"))
    try:
        from sgl_kernel import attention
    finally:
        sys.path.pop(0)
    for adaptation in table.adaptations.values():
        if adaptation.kind != "attention_call_signature":
            continue
        for key, op in (("decode", attention.decode_attention_cpu), ("extend", attention.extend_attention_cpu)):
            params = list(inspect.signature(op).parameters)
            names = adaptation.params[key]
            assert set(names) <= set(params), (adaptation.name, key)
            assert [p for p in params if p in names] == names, (adaptation.name, key)  # the call's order
            assert set(params) - set(names) <= attention.OMITTED_DEFAULTS.keys(), (adaptation.name, key)


def test_a_broken_table_is_one_line_naming_the_entry():
    good = {"schema": 1, "dependency_sets": {"base": {"packages": []}},
            "adaptations": {"amx": {"kind": "module_has_amx", "module": "m"}},
            "releases": [{"versions": ["0.5.1"], "dependency_set": "base", "adaptations": ["amx"]}]}
    assert parse_table(good, port.KNOWN_KINDS).row("0.5.1").adaptations[0].params == {"module": "m"}
    cases = [
        ({**good, "adaptations": {"amx": {"kind": "magic"}}}, "kind 'magic' is not one of"),
        ({**good, "releases": [{**good["releases"][0], "adaptations": ["nope"]}]}, "nope not defined under [adaptations]"),
        ({**good, "releases": [{**good["releases"][0], "dependency_set": "x"}]}, "dependency_set 'x' is not one of"),
        ({**good, "releases": [good["releases"][0], good["releases"][0]]}, "0.5.1 is in two rows"),
        ({**good, "releases": [{**good["releases"][0], "versions": ["0.5.1rc1"]}]}, "is not a release version"),
    ]
    for data, expected in cases:
        with pytest.raises(TableError, match=expected.replace("[", r"\[").replace("]", r"\]")):
            parse_table(data, port.KNOWN_KINDS)


def test_an_unknown_release_says_how_to_add_it(table):
    with pytest.raises(UnknownRelease) as raised:
        table.row("0.5.9")
    message = str(raised.value)
    assert "\n" not in message and "0.5.9" in message and "[[releases]]" in message and "releases.toml" in message


# ---- versions and ranges ---------------------------------------------------------------------------------


def test_release_order_puts_post_releases_after_their_release():
    assert sort_releases(["0.5.11", "0.5.10.post1", "0.5.10", "0.5.10rc0", "0.5.9", "0.5.10.dev1", "0.5.12+cpu"]) == \
        ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"]
    assert release_key("0.5.10.post2") > release_key("0.5.10.post1") > release_key("0.5.10")


def test_a_range_is_inclusive_final_and_post_releases_in_version_order():
    assert releases_in_range("0.5.10..0.5.13", list(reversed(REGISTRY))) == \
        ["0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13"]
    assert releases_in_range("0.5.10..0.5.23", REGISTRY) == SWEEP
    assert releases_in_range("0.5.12.post1", REGISTRY) == ["0.5.12.post1"]
    assert releases_in_range(" 0.5.22 .. 0.5.23 ", REGISTRY) == ["0.5.22", "0.5.23"]


@pytest.mark.parametrize("spec, expected", [
    ("0.5.13..0.5.10", "runs backwards"),
    ("0.5.10..0.5.99", "0.5.99 is not a release on the registry"),
    ("0.5.10..latest", "'latest' is not a release version"),
    ("0.5.24rc0", "0.5.24rc0 is a pre-, dev or local release"),
])
def test_a_bad_range_is_one_line(spec, expected):
    with pytest.raises(HarnessInputError, match=expected) as raised:
        releases_in_range(spec, REGISTRY)
    assert "\n" not in str(raised.value)


def test_prepare_refuses_a_release_the_table_does_not_name(tmp_path):
    with pytest.raises(ReleaseUnavailable) as raised:
        prepare("0.5.9", prefix=tmp_path, progress=lambda _: pytest.fail("nothing may be built"))
    assert "\n" not in str(raised.value) and "SGLang 0.5.9 is not in the CPU release table" in str(raised.value)
    assert not any(tmp_path.iterdir())


def test_prepare_without_the_base_venv_says_what_to_run(tmp_path):
    with pytest.raises(ReleaseUnavailable, match="run `make sglang-cpu`"):
        prepare("0.5.13", prefix=tmp_path, progress=lambda _: pytest.fail("nothing may be built"))


# ---- the shims pick the row of the release on the path ----------------------------------------------------

# A fake `sglang` distribution: its dist-info (what the shims read) and the modules an adaptation
# hooks, with the names the hook checks for.
FAKE_MODULES = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/server_args.py": "def cpu_has_amx_support():\n    return False\n",
    "sglang/srt/runtime_context.py": textwrap.dedent("""\
        class _Platform:
            has_amx = False
            def _install(self, has_amx):
                self.has_amx = has_amx
        _PLATFORM = _Platform()
        """),
}


def fake_sglang(root: Path, version: str) -> Path:
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    for name, text in FAKE_MODULES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def with_shims(code: str, *pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, pythonpath), str(HARNESS_SOURCE_ROOT)]),
           "PYTHONNOUSERSITE": "1"}
    return subprocess.run([sys.executable, "-c", "import sglang_spec_harness.sglang_cpu.shims\n" + code], capture_output=True,
                          text=True, env=env, timeout=120)


def applied_line(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if "adaptations" in x and x.startswith("harness sglang_cpu shims:")]
    return line


@pytest.mark.parametrize("release", ["0.5.10", "0.5.12.post1", "0.5.13", "0.5.16", "0.5.19", SGLANG_VERSION])
def test_the_shims_apply_the_adaptations_of_the_release_on_the_path(table, tmp_path, release):
    proc = with_shims("", fake_sglang(tmp_path, release))
    assert proc.returncode == 0, proc.stderr
    names = ", ".join(a.name for a in table.row(release).adaptations)
    assert f"SGLang {release}: adaptations {names} (releases.toml)" in applied_line(proc.stderr)


def test_the_backend_choice_hook_of_an_old_release_changes_only_the_module_that_picks_it(tmp_path):
    proc = with_shims("import sglang.srt.server_args as a, sglang.srt.runtime_context as r\n"
                      "print(a.cpu_has_amx_support(), r._PLATFORM.has_amx)", fake_sglang(tmp_path, "0.5.13"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]
    assert "harness sglang_cpu port: amx_kept_via_server_args (module_has_amx):" in proc.stderr
    proc = with_shims("import sglang.srt.server_args as a, sglang.srt.runtime_context as r\n"
                      "print(a.cpu_has_amx_support(), r._PLATFORM.has_amx)", fake_sglang(tmp_path / "new", SGLANG_VERSION))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_a_release_whose_layout_differs_from_the_table_stops_the_server(tmp_path):
    root = fake_sglang(tmp_path, "0.5.13")
    (root / "sglang/srt/server_args.py").write_text("x = 1\n")  # no cpu_has_amx_support
    proc = with_shims("import sglang.srt.server_args\nprint('ran')", root)
    assert proc.returncode == 70 and "ran" not in proc.stdout
    assert "amx_kept_via_server_args: sglang.srt.server_args has no cpu_has_amx_support" in proc.stderr


def test_an_unknown_release_on_the_path_stops_the_server_with_one_line(tmp_path):
    proc = with_shims("print('ran')", fake_sglang(tmp_path, "0.5.9"))
    assert proc.returncode == 70 and "ran" not in proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("harness patch failed: sglang_cpu_shims: SGLang 0.5.9 is not in the CPU release table")


def test_without_any_sglang_the_shims_use_the_row_of_the_make_sglang_cpu_release(table):
    proc = with_shims("")
    assert proc.returncode == 0, proc.stderr
    assert f"no sglang distribution on the path: the row of {SGLANG_VERSION}" in applied_line(proc.stderr)


def test_old_attention_calls_reach_the_stand_in_with_the_omitted_arguments_defaulted(tmp_path):
    pytest.importorskip("torch")
    # 0.5.12.post1's intel_amx backend: decode with 13 positional arguments, extend with 14
    code = textwrap.dedent("""\
        import json, torch, sgl_kernel
        from sgl_kernel import attention
        g = torch.Generator().manual_seed(0)
        H, D, slots = 2, 8, 40
        kb, vb = torch.randn(slots, H, D, generator=g), torch.randn(slots, H, D, generator=g)
        r2t = torch.arange(64, dtype=torch.int32).view(2, 32) + 1
        pool, lens = torch.tensor([1, 0]), torch.tensor([5, 7])
        q = torch.randn(2, H, D, generator=g)
        k, v, loc = torch.randn(2, H, D, generator=g), torch.randn(2, H, D, generator=g), torch.tensor([6, 33])
        out_old, out_new = torch.empty(2, H, D), torch.empty(2, H, D)
        kb2, vb2 = kb.clone(), vb.clone()
        torch.ops.sgl_kernel.decode_attention_cpu(q, kb, vb, out_old, k, v, loc, None, r2t, pool, lens, 0.3, 0.0)
        attention.decode_attention_cpu(q, kb2, vb2, 1.0, 1.0, out_new, k, v, loc, None, r2t, pool, lens, 0.3, 0.0,
                                       False, 0, None, None)
        same = [torch.equal(out_old, out_new), torch.equal(kb, kb2)]
        try:  # extend: seq_lens that do not include the extend tokens are refused in plain words
            torch.ops.sgl_kernel.extend_attention_cpu(torch.randn(4, H, D), None, None, torch.empty(4, H, D), kb, vb,
                                                      r2t, pool, torch.tensor([3, 1]), torch.tensor([2, 2]),
                                                      torch.tensor([0, 2]), 2, 0.3, 0.0)
        except ValueError as exc:
            same.append(str(exc))
        print(json.dumps(same))
        """)
    proc = with_shims(code, fake_sglang(tmp_path, "0.5.12.post1"))
    assert proc.returncode == 0, proc.stderr
    decode_equal, cache_equal, error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert decode_equal and cache_equal
    assert "seq_lens[1] = 1 is shorter than extend_seq_lens[1] = 2" in error
    assert "harness sglang_cpu port: attention_ops_0_5_10 (attention_call_signature):" in proc.stderr


def test_routed_triton_launches_run_the_stand_in_and_any_other_launch_names_its_kernel(tmp_path):
    pytest.importorskip("triton")
    # a kernel with the name and the parameters of 0.5.13's fill_bonus_tokens (the body is never run:
    # the launch goes to the stand-in), and one that no route covers
    code = textwrap.dedent("""\
        import json, torch, triton, triton.language as tl

        @triton.jit
        def fill_bonus_tokens(accept_tokens, accept_lens, bonus_tokens_ptr, accept_stride):
            pass

        @triton.jit
        def some_other_kernel(x):
            pass

        tokens = torch.arange(12, dtype=torch.int32).view(3, 4) * 10
        lens = torch.tensor([1, 4, 2], dtype=torch.int32)
        bonus = torch.zeros(3, dtype=torch.int32)
        fill_bonus_tokens[(3,)](tokens, lens, bonus, 4)
        try:
            some_other_kernel[(1,)](tokens)
            other = "ran"
        except NotImplementedError as exc:
            other = str(exc)
        print(json.dumps([bonus.tolist(), other]))
        """)
    script = tmp_path / "launch.py"  # triton.jit reads the kernels' source from their file
    script.write_text(code)
    proc = with_shims(f"import runpy\nrunpy.run_path({str(script)!r})", fake_sglang(tmp_path / "site", "0.5.13"))
    assert proc.returncode == 0, proc.stderr
    bonus, other = json.loads(proc.stdout.strip().splitlines()[-1])
    assert bonus == [0, 70, 90]  # row b's accept_lens[b]-th token
    assert "Triton kernel 'some_other_kernel' was launched on this CPU" in other
    assert "first launch of fill_bonus_tokens ran its torch stand-in" in proc.stderr


# ---- a real old release ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_install() -> Path:
    if not is_current(INSTALL):
        why = f"{INSTALL} is missing or out of date: run `make sglang-cpu`"
        if os.environ.get("HARNESS_REQUIRE_SGLANG_CPU"):
            pytest.fail(why)
        pytest.skip(why)
    return INSTALL


@pytest.mark.real_sglang
def test_an_old_release_prepares_once_and_imports_its_eagle_worker_with_the_shims(base_install):
    from sglang_spec_harness.sglang_cpu.releases import import_check

    messages: list[str] = []
    environment = prepare("0.5.12.post1", prefix=base_install, progress=messages.append)
    again = prepare("0.5.12.post1", prefix=base_install, progress=lambda m: pytest.fail(f"rebuilt: {m}"))
    assert again.facts["built"] == "cached" and again.pythonpath == environment.pythonpath
    source, deps = map(Path, environment.pythonpath)
    assert source.name == "0.5.12.post1" and (source / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py").is_file()
    assert deps.name == "transformers-5.6.0"
    facts = environment.facts
    assert facts["sglang"] == "0.5.12.post1" and facts["dependency_set"] == "transformers-5.6.0"
    assert facts["transformers"] == {"pinned": "5.6.0", "used": "5.6.0", "own_pin": True}
    assert facts["torch"]["pinned"] == "2.11.0" and facts["torch"]["used"].startswith("2.13.0") and not facts["torch"]["own_pin"]
    assert facts["sgl_kernel"]["used"].startswith("harness stand-in")
    assert "triton_routes_0_5_12" in facts["adaptations"]
    json.dumps(facts)
    import_check(environment)  # the EAGLE worker and the HTTP server, with the shims, in that environment


@pytest.mark.real_sglang
def test_the_make_sglang_cpu_release_resolves_to_the_base_venv(base_install):
    environment = prepare(SGLANG_VERSION, prefix=base_install, progress=lambda m: pytest.fail(f"built: {m}"))
    assert environment.pythonpath == [] and environment.python == str(base_install.resolve() / "venv" / "bin" / "python")
    assert environment.facts["built"] == "cached" and environment.facts["dependency_set"] == "base"


# The child of the test below: each Triton kernel a release's row routes, lifted from the release's
# own source and run by Triton's interpreter, against the same launch routed to the stand-in.
ROUTES_CHILD = textwrap.dedent('''\
    import ast, json, sys
    from pathlib import Path
    import torch, triton, triton.language as tl
    sys.path[:0] = [sys.argv[3], sys.argv[4]]  # tests/ (sglang_wheel.lift), the stand-ins (sgl_kernel)
    from support import sglang_wheel
    from sglang_spec_harness.sglang_cpu import port

    source, kernels = Path(sys.argv[1]), sys.argv[2].split(",")
    found = {}
    for path in sorted(source.glob("sglang/**/*.py")):
        text = path.read_text(errors="replace")
        if "triton.jit" not in text or not any(f"def {k}(" in text for k in kernels):
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name in kernels and node.name not in found:
                if any("jit" in ast.unparse(d) for d in node.decorator_list):
                    namespace = {"triton": triton, "tl": tl, "torch": torch}
                    sglang_wheel.lift(path, (node.name,), namespace)
                    found[node.name] = namespace[node.name]

    g = torch.Generator().manual_seed(0)
    bs, steps, width, pool_len = 3, 5, 6, 64
    r2t = torch.randint(1, 500, (6, pool_len), dtype=torch.int32, generator=g)
    rpi, seq = torch.tensor([4, 0, 2]), torch.tensor([7, 20, 13])
    accept_lens = torch.tensor([1, 6, 3], dtype=torch.int32)
    accept_index = torch.full((bs, width), -1, dtype=torch.int32)
    for b, n in enumerate(accept_lens.tolist()):
        accept_index[b, :n] = b * width + torch.arange(n, dtype=torch.int32)
    draft_locs = lambda: [rpi, r2t, seq, torch.zeros(bs * steps, dtype=torch.int64), pool_len, 1, steps]
    bonus = lambda: [torch.randint(0, 1000, (bs, width), dtype=torch.int32, generator=torch.Generator().manual_seed(1)),
                     accept_lens, torch.zeros(bs, dtype=torch.int32), width]
    accepted = lambda: [accept_index.flatten(), torch.arange(100, 100 + bs * width), torch.zeros(bs * width, dtype=torch.int64), 32]
    def gather(has3):
        s = [torch.rand(8, 1, generator=torch.Generator().manual_seed(2)), torch.arange(8).view(8, 1),
             torch.arange(8, dtype=torch.int32) * 3, torch.rand(8, 16, generator=torch.Generator().manual_seed(3))]
        idx = torch.tensor([5, 1, 3, 5])
        d = [torch.zeros((4, *t.shape[1:]), dtype=t.dtype) for t in s]
        a = [idx, s[0], d[0], 1, s[1], d[1], 1, s[2], d[2], 1]
        a += [s[3], d[3], 16] if has3 else [idx, idx, 1]
        return a, {"HAS3": has3, "BLOCK": 16}
    cases = {
        "assign_draft_cache_locs_page_size_1": [((bs,), draft_locs, {})],
        "assign_draft_cache_locs_contiguous": [((bs,), draft_locs, {})],
        "assign_extend_cache_locs": [((bs,), lambda: [rpi, r2t, seq, seq + width, torch.zeros(bs * width, dtype=torch.int64), pool_len, 4], {})],
        "assign_req_to_token_pool": [((bs,), lambda: [rpi, r2t.clone(), seq, seq + width, torch.arange(1, 1 + bs * width), pool_len, 4], {})],
        "fill_bonus_tokens": [((bs,), bonus, {})],
        "fill_new_verified_id": [((bs,), bonus, {})],
        "fill_accepted_out_cache_loc": [((bs * width,), accepted, {})],
        "fill_accept_out_cache_loc": [((bs * width,), accepted, {})],
        "_gather_rows_kernel": [((4, 1), lambda h=h: gather(h)[0], gather(h)[1]) for h in (True, False)],
    }
    out = {}
    for name, kernel in found.items():
        port._ROUTED[name] = "test"
        for grid, make, kwargs in cases[name]:
            real, routed = make(), make()
            kernel[grid](*real, **kwargs)
            port._route_launch(kernel, grid)(*routed, **kwargs)
            same = all(torch.equal(a, b) for a, b in zip(real, routed) if isinstance(a, torch.Tensor))
            out[name] = out.get(name, True) and same
    print(json.dumps(out))
    ''')


@pytest.mark.real_sglang
@pytest.mark.parametrize("release", ["0.5.10", "0.5.12.post1", "0.5.13"])
def test_each_routed_triton_kernel_of_a_release_matches_its_stand_in(base_install, table, tmp_path, release):
    pytest.importorskip("triton")
    environment = prepare(release, prefix=base_install, progress=lambda _: None)
    (routes,) = [a for a in table.row(release).adaptations if a.kind == "triton_routes"]
    kernels = [k for k in routes.params["kernels"] if k != "copy_all_layer_kv_cache_tiled"]  # tests/test_sglang_cpu_stand_ins.py
    child = tmp_path / "routes_child.py"
    child.write_text(ROUTES_CHILD)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(HARNESS_SOURCE_ROOT), "PYTHONNOUSERSITE": "1"}
    proc = subprocess.run([sys.executable, str(child), environment.pythonpath[0], ",".join(kernels), str(REPO / "tests"),
                           str(REPO / "sglang_spec_harness" / "sglang_cpu" / "stand_ins")], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(results) == sorted(kernels)  # every routed kernel was found in the release's own source
    assert all(results.values()), results
