"""What the service reaches for inside the libraries it builds on: one module per library.

Each reach into a non-public API is a named function, class or constant whose docstring
says what it reaches, why no public seam does, and what breaks without it. The package
imports them from here; tests/test_compat.py checks each against the installed version.
"""
