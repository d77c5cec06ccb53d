"""Build the two optional compiled kernel modules; everything else is declared in pyproject.toml.

* ``log.record._codec`` (log/record/_codec.pyx): the format layer's record decode, encode and
  key MD5 for readers, producers and key indexes;
* ``cleaner.kernels._fastpath`` (cleaner/kernels/_fastpath.pyx): the cleaner's map, retain and
  rewrite loops and its key table. Both include log/record/_scan.pxi (reading the v2 records).

The extensions are optional, the way PyYAML's and aiokafka's are: without a C compiler (or with
TIERCOMPACT_NO_EXTENSIONS=1) the build still succeeds and tiercompact runs the pure-Python
twins (log/record/_codec_py.py, cleaner/kernels/_fastpath_py.py), logging one warning each when
first needed. Cython comes from PyPI at build time (pyproject's build-system requires).

OpenSSL's libcrypto is optional too: the key-index kernel (``md5_keys``, _codec_md5.pxi)
hashes keys with its MD5. A compile-and-link probe looks for <openssl/md5.h> and -lcrypto
(Debian/Ubuntu: libssl-dev to build, libssl3 at run time); only when it passes is the
extension linked with crypto and TC_HAVE_LIBCRYPTO defined. Without it the extension still
builds and scan_keys hashes with hashlib (same digests). TIERCOMPACT_NO_LIBCRYPTO=1 skips it.
"""

from __future__ import annotations

import os
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the extension cannot be compiled; the extensions compile side by
    side (one per core: most of a fresh install's build time is gcc on the two generated C files)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = max(1, min(os.cpu_count() or 1, len(self.extensions or ())))

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, no headers, ...: DistutilsPlatformError and friends
            self._skip(e)

    def build_extension(self, ext: Extension) -> None:
        if ext.name == "log.record._codec" and self._has_libcrypto():
            ext.define_macros = [*ext.define_macros, ("TC_HAVE_LIBCRYPTO", "1")]
            ext.libraries = [*ext.libraries, "crypto"]
        try:
            super().build_extension(ext)
        except Exception as e:  # CCompilerError, DistutilsExecError, CompileError, ...
            self._skip(e)

    def _has_libcrypto(self) -> bool:
        """Whether a program calling OpenSSL's MD5 compiles and links against -lcrypto here."""
        if os.environ.get("TIERCOMPACT_NO_LIBCRYPTO"):
            return False
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "tc_md5_probe.c")
            with open(src, "w") as f:
                f.write(_MD5_PROBE)
            try:
                objects = self.compiler.compile([src], output_dir=tmp)
                self.compiler.link_executable(objects, "tc_md5_probe", output_dir=tmp, libraries=["crypto"])
            except Exception as e:  # CompileError, LinkError: no headers or no library
                sys.stderr.write(
                    "WARNING: OpenSSL's libcrypto (headers and library) was not found "
                    f"({type(e).__name__}); key indexes hash keys with hashlib instead (slower).\n"
                )
                return False
        return True

    @staticmethod
    def _skip(e: BaseException) -> None:
        sys.stderr.write(
            "WARNING: tiercompact's compiled record kernels could not be built "
            f"({type(e).__name__}: {e}); the pure-Python kernels will be used (slower).\n"
        )


_MD5_PROBE = """\
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/md5.h>
int main(void) {
    unsigned char out[16];
    MD5_CTX c;
    MD5_Init(&c);
    MD5_Update(&c, "", 0);
    MD5_Final(out, &c);
    return out[0] == 0xd4 ? 0 : 1;
}
"""


_ROOT = os.path.dirname(os.path.abspath(__file__))


def _extensions() -> list[Extension]:
    if os.environ.get("TIERCOMPACT_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        sys.stderr.write("WARNING: Cython is not installed; tiercompact builds without compiled kernels.\n")
        return []
    exts = [Extension("log.record._codec", ["log/record/_codec.pyx"], extra_compile_args=["-O3"]),
            Extension("cleaner.kernels._fastpath", ["cleaner/kernels/_fastpath.pyx"], extra_compile_args=["-O3"])]
    try:
        # include_path: the cleaner's module includes "log/record/_scan.pxi" from the project root
        return cythonize(exts, compiler_directives={"language_level": "3"}, include_path=[_ROOT], quiet=True,
                         nthreads=min(os.cpu_count() or 1, len(exts)))
    except Exception as e:  # a Cython version that cannot translate the module: stay pure Python
        OptionalBuildExt._skip(e)
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
