"""The build's one check; everything else about the package is in pyproject.toml."""

import sys

import setuptools
from setuptools import setup

# pyproject.toml names the license as PEP 639 has it (``license = "Apache-2.0"``), which
# setuptools reads from version 77 on; older ones refuse the file with a schema error that
# does not say what to do. The build requirement asks for 77, but ``pip install
# --no-build-isolation`` builds with whatever setuptools is installed: say so here, before
# setuptools reads the file. (The older table form, ``{text = ...}``, is deprecated by
# setuptools 77 and due to be refused from 2027.)
_NEEDED = 77
try:
    _found = int(setuptools.__version__.split(".")[0])
except ValueError:  # a version we cannot read: let setuptools speak for itself
    _found = _NEEDED
if _found < _NEEDED:
    sys.exit(
        f"steadystream needs setuptools>={_NEEDED} to build (pyproject.toml's license is a"
        f" PEP 639 string); this build has setuptools {setuptools.__version__}. Run"
        f" `pip install 'setuptools>={_NEEDED}'` first (pip's --no-build-isolation builds with"
        " the setuptools already installed), or install without --no-build-isolation."
    )

setup()
