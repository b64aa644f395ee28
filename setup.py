"""The optional C extension; everything else about the package is in pyproject.toml.

``steadystream.stamped._lane`` is the stamped connection's read path and the gateway's
express lane in C (docs/performance.md, "The native lane"). It is built on Linux only
(``recvmsg`` with kernel receive stamps) and only where a C compiler is found; when the
build fails the package installs without it and runs the same paths in Python, so an
install never fails for want of a compiler. ``STEADYSTREAM_NATIVE=0`` turns it off at run
time.
"""

import sys

from setuptools import Extension, setup

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
