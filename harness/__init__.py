"""Profiler-driven performance-regression harness for SGLang speculative decoding."""

__version__ = "0.1.0"
