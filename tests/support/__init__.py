"""Helpers the tests share: run-directory factories, fake servers, process and fault tools, SGLang wheel probes."""
