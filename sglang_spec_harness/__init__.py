"""Profiler-driven performance-regression harness for SGLang speculative decoding."""

__version__ = "0.2.0"
