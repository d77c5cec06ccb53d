"""glibc's malloc keeps megabyte buffers in its heaps once the node tunes it (service/malloc_tuning.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from service.malloc_tuning import tune_malloc

#: in a fresh interpreter: tune (or not), then count the page faults of making and freeing 4 MiB buffers, again and
#: again (glibc's defaults map each one, or give the heap's top back, and so fault fresh zeroed pages in each time)
_PROBE = """
import resource
import sys
from service.malloc_tuning import tune_malloc

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

tuned = tune_malloc(int(sys.argv[1]))
for i in range(30):
    if i == 10:
        start = faults()
    buffers = [bytearray(4 << 20) for _ in range(4)]
    del buffers
print(tuned, faults() - start)
"""


def _probe(threshold: int, env: dict[str, str] | None = None) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(threshold)], capture_output=True, text=True, check=True,
                         env=env)
    tuned, faults = out.stdout.split()
    return tuned == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_tuned_malloc_serves_megabyte_buffers_from_its_heap() -> None:
    tuned, faults = _probe(64 << 20)
    assert tuned and faults < 100  # the buffers freed were reused: no fresh page
    untuned, faults_default = _probe(0)
    assert not untuned and faults_default > 20 * 1024  # glibc's defaults: each 16 MiB round faulted in again


def test_an_operators_malloc_environment_wins() -> None:
    assert not tune_malloc(64 << 20, environ={"MALLOC_MMAP_THRESHOLD_": "131072"})
    assert not tune_malloc(64 << 20, environ={"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"})
    assert not tune_malloc(0, environ={})
