"""Importing this configures numba (``stream.runtime.configure``): every module that imports numba
imports this first, in an import block of its own before numba's (``# isort: split``), so that numba
reads this package's cache directory and thread settings whichever module a process imports first."""

from stream.runtime import configure

configure()
