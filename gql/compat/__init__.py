"""What the service reaches for inside the libraries it builds on: one module per library.

Each reach into a library's non-public API (an underscore name, a module the
library does not document, a method it does not document as a hook) is a
small named function, class or constant here, whose docstring says what it
reaches, why no public seam does the same, and what breaks without it. The
rest of the package imports them from here, so an upgrade of a library is
read in one file; tests/test_compat.py checks each reach against the
installed version, and that nothing outside this package makes one.
"""
