"""Disks that refuse writes, for checkpoint tests: a full tmpfs, or a directory that refuses.

Tests run as root here, and root ignores permission bits, so a directory made read-only
refuses nothing. In order of preference:

- :func:`tmpfs` mounts a small tmpfs (root may, where the container allows it), which
  :func:`full` fills up: writes fail with ENOSPC, as on a real full disk;
- :func:`refusing` makes a directory immutable (``chattr +i``, which binds root too), or for
  anyone else read-only; new files and directories in it fail with EPERM or EACCES.

Each checks that the refusal really happens before it yields.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path


def tmpfs(path: Path, size_mb: int = 256) -> bool:
    """Mounts a tmpfs of ``size_mb`` at ``path`` (created); False where mounting is refused."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def unmount(path: Path) -> None:
    """Unmounts what :func:`tmpfs` mounted (lazily: a process may still hold a file there)."""
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextlib.contextmanager
def full(path: Path):
    """Fills the filesystem of ``path`` until writes fail with ENOSPC; frees it afterwards."""
    filler = path / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
        os.close(fd)
        fd = None
        probe = path / "probe.bin"
        try:
            probe.write_bytes(b"\0" * (1 << 16))
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
        else:
            raise AssertionError(f"{path}: the filesystem still takes writes")
        finally:
            probe.unlink(missing_ok=True)
        yield "ENOSPC"
    finally:
        if fd is not None:
            os.close(fd)
        filler.unlink(missing_ok=True)


@contextlib.contextmanager
def refusing(path: Path):
    """Makes ``path`` refuse new entries (``chattr +i`` as root, else read-only)."""
    immutable = os.geteuid() == 0 and shutil.which("chattr") is not None
    if immutable:
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    else:
        mode = path.stat().st_mode
        path.chmod(0o555)
    try:
        try:
            (path / "probe").mkdir()
        except OSError as err:
            assert err.errno in (errno.EPERM, errno.EACCES, errno.EROFS), err
        else:
            (path / "probe").rmdir()
            raise AssertionError(f"{path}: still takes new entries")
        yield "EPERM" if immutable else "EACCES"
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)
        else:
            path.chmod(mode)
