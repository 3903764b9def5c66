"""The one thing pyproject.toml cannot say: the receiver's C extension (kct.receiver._otlpscan).

It is built by `pip install .` / `pip install -e .` (so by `make venv` and the image's build stage) and
needs a C compiler and the Python headers. Optional: without a compiler the package still installs and the
receiver runs its pure-Python walk (same answers, more CPU); the tests that need the extension say so.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kct.receiver._otlpscan",
            sources=["operator/kct/receiver/_otlpscan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
