"""The patch bootstrap directory (put on a server's PYTHONPATH, not imported as a package).

This file exists only so that a non-editable install ships `sitecustomize.py` with the package.
"""
