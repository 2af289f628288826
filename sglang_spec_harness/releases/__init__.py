"""SGLang releases and revisions as points of a sweep or a bisection.

- `versions`: which releases a range names (`0.5.10..0.5.23`: final releases and .postN, in version
  order), from the package registry;
- `environments`: where a release's code runs: `ReleaseEnvironment` and the providers that build one
  (the generic one installs the release's source beside a given interpreter; the CPU one lives in
  `sglang_spec_harness.sglang_cpu.releases`);
- `points`: a scenario with one variant moved to a release or a commit, and one point's run (the
  selected trials, the trials that run once adopted, the rules checked, the report).
"""
