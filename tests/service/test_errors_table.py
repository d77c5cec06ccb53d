"""Every TiercompactError subclass in the tree has a specific HTTP status in service/errors.py."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from log.errors import TiercompactError
from service.errors import STATUS, mapped_class_for, status_for

PACKAGES = ["log", "metadata", "remote", "cleaner", "service"]


def _import_everything() -> None:
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        for mod in pkgutil.walk_packages(pkg.__path__, prefix=name + "."):
            if ".spark" in mod.name:
                continue  # pyspark is optional; its errors derive from the cleaner's
            importlib.import_module(mod.name)


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out.add(sub)
        out |= _subclasses(sub)
    return out


def test_every_error_class_is_mapped() -> None:
    _import_everything()
    classes = _subclasses(TiercompactError)
    assert len(classes) >= 20
    unmapped = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if mapped_class_for(c) is None)
    assert unmapped == [], f"add these to service.errors.STATUS: {unmapped}"


@pytest.mark.parametrize("cls", list(STATUS), ids=lambda c: c.__name__)
def test_statuses_are_http_errors(cls: type[TiercompactError]) -> None:
    assert 400 <= status_for(cls) < 600
