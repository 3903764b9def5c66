"""The one thing pyproject.toml cannot say: the receiver's C extension (kct.receiver._otlpscan).

It is built by `pip install .` / `pip install -e .`, so by `make venv` and the image's build stage (a
Python base with gcc and the Python headers, PYTHON_BUILD_IMAGE in the Dockerfile). Not optional: the
receiver's "this push needs no change" verdict is the extension's (kct.receiver.sanitize says who owns
what), so an install without a compiler fails here rather than shipping a receiver that cannot start.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kct.receiver._otlpscan",
            sources=["operator/kct/receiver/_otlpscan.c"],
            extra_compile_args=["-O2"],
        )
    ]
)
