"""Build the optional compiled record kernels (log/record/_fastpath.pyx); everything else is
declared in pyproject.toml.

The extension is optional, the way PyYAML's and aiokafka's are: without a C compiler (or with
TIERCOMPACT_NO_EXTENSIONS=1) the build still succeeds and tiercompact runs the pure-Python
reference kernels (log/record/_fastpath_py.py), logging one warning when the cleaner first
needs them. Cython comes from PyPI at build time (pyproject's build-system requires).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the extension cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, no headers, ...: DistutilsPlatformError and friends
            self._skip(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # CCompilerError, DistutilsExecError, CompileError, ...
            self._skip(e)

    @staticmethod
    def _skip(e: BaseException) -> None:
        sys.stderr.write(
            "WARNING: tiercompact's compiled record kernels could not be built "
            f"({type(e).__name__}: {e}); the pure-Python kernels will be used (slower).\n"
        )


def _extensions() -> list[Extension]:
    if os.environ.get("TIERCOMPACT_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        sys.stderr.write("WARNING: Cython is not installed; tiercompact builds without compiled kernels.\n")
        return []
    ext = Extension("log.record._fastpath", ["log/record/_fastpath.pyx"], extra_compile_args=["-O3"])
    try:
        return cythonize([ext], compiler_directives={"language_level": "3"}, quiet=True)
    except Exception as e:  # a Cython version that cannot translate the module: stay pure Python
        OptionalBuildExt._skip(e)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
