"""A Kubernetes ConfigMap volume, written as the kubelet updates one: the tests of the
watched scenario files (tests/scenario/test_watch.py, tests/e2e/test_watched_scenarios.py,
tests/workers/test_workers_live.py)."""

from __future__ import annotations

import os
from pathlib import Path


def configmap(mount: Path, version: str, files: dict[str, str]) -> None:
    """Write ``files`` as the kubelet's AtomicWriter updates a ConfigMap volume: a new
    directory ``..<version>`` with every key, the ``..data`` link swapped to it in one
    rename, then a link ``NAME -> ..data/NAME`` for each new key, the old directory
    removed, and the links of keys gone removed."""
    data = mount / f"..{version}"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    old = os.readlink(mount / "..data") if (mount / "..data").is_symlink() else None
    (mount / "..data_tmp").symlink_to(data.name)
    os.rename(mount / "..data_tmp", mount / "..data")
    for name in files:
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(Path("..data") / name)
    if old is not None:
        for entry in (mount / old).iterdir():
            entry.unlink()
        (mount / old).rmdir()
    for name in os.listdir(mount):
        if (mount / name).is_symlink() and not (mount / name).exists():
            (mount / name).unlink()  # a key gone from the ConfigMap
