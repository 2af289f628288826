"""The micro engine: a small EAGLE-style chain speculative decoder served over SGLang's HTTP API.

It stands apart from the rest of the harness: nothing here imports other harness modules (except
`harness.__version__`), and the harness talks to it only over HTTP, exactly as it talks to SGLang.
Start it with `python -m sglang_spec_harness.micro.server --help`.
"""
