"""The optional C extension; everything else about the package is in pyproject.toml.

``steadystream.stamped._lane`` is the stamped connection's read path and the gateway's
express lane in C (docs/performance.md, "The native lane"). It is built on Linux only
(``recvmsg`` with kernel receive stamps) and only where a C compiler is found; when the
build fails the package installs without it and runs the same paths in Python, so an
install never fails for want of a compiler. ``STEADYSTREAM_NATIVE=0`` turns it off at run
time.
"""

import sys

import setuptools
from setuptools import Extension, setup

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

extensions = []
if sys.platform.startswith("linux"):
    extensions.append(
        Extension(
            "steadystream.stamped._lane",
            sources=[
                "src/steadystream/stamped/_lane.c",
                "src/steadystream/stamped/_lane_cut.c",
                "src/steadystream/stamped/_lane_reactor.c",
            ],
            depends=["src/steadystream/stamped/_lane.h"],
            extra_compile_args=[
                "-O2",
                "-std=c11",
                "-fvisibility=hidden",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
            ],
            optional=True,
        )
    )

setup(ext_modules=extensions)
