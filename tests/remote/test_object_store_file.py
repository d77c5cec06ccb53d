"""FileObjectStore specifics: keys cannot escape the root, temp files stay invisible."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from log.errors import InvalidRequestError
from remote import load_object_store
from remote.file_store import TMP_DIR, FileObjectStore


def test_symlinked_keys_cannot_escape_the_root(tmp_path: Path) -> None:
    store = FileObjectStore(tmp_path / "root")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, tmp_path / "root" / "link")
    with pytest.raises(InvalidRequestError, match="outside"):
        store.put("link/x", b"escape")
    assert list(outside.iterdir()) == []
    with pytest.raises(InvalidRequestError, match="reserved"):
        store.put(f"{TMP_DIR}/x", b"x")


def test_crash_leftovers_are_never_listed(tmp_path: Path) -> None:
    store = FileObjectStore(f"file://{tmp_path}/root")
    store.put("a/b.log", b"1")
    (tmp_path / "root" / TMP_DIR).mkdir(exist_ok=True)
    (tmp_path / "root" / TMP_DIR / ".tmp-abc").write_bytes(b"partial")
    assert list(store.list()) == ["a/b.log"]
    store.clear_temp()
    assert not (tmp_path / "root" / TMP_DIR).exists()
    store.delete("a/b.log")
    assert not (tmp_path / "root" / "a").exists()  # empty prefix directories are pruned


def test_load_file_store_from_url_or_path(tmp_path: Path) -> None:
    a = load_object_store((tmp_path / "s").as_uri())
    b = load_object_store(str(tmp_path / "s"))
    a.put("k", b"v")
    assert b.get("k") == b"v" and a.url == b.url == (tmp_path / "s").as_uri()
