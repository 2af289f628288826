"""Patch modules that a scenario variant imports into its server process (`patches:`).

Each runs inside the server's interpreter (SGLang's), so it uses only the standard library at import
time and imports torch and SGLang lazily, when the code it patches is loaded.
"""
