"""The cleaner's record kernels: compiled (``_fastpath.pyx``) or pure Python (``_fastpath_py.py``),
chosen by ``fastpath.py``; both decide as :mod:`cleaner.retention` does."""
