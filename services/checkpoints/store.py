"""Checkpoint directories: staging, manifest with checksums, atomic rename, rotation, validation.

A checkpoint is a directory ``<root>/ckpt-<frames:012d>-<n>`` holding one sub-directory or file
per component (``replay-<i>/``, ``collector-<i>.json``, ``learner-<rank>.pt``, ``driver.json``)
and ``manifest.json``. It is written under ``<root>/.staging-<name>``; every file is fsynced,
``manifest.json`` (format version, config digest, counters, each file's size and SHA-256) is
written last, and the directory is renamed into place, so a crash leaves either a complete
checkpoint or a staging directory that loading ignores. Rotation then deletes the oldest
complete checkpoints beyond ``keep``; a failed save never touches older ones.

A rotation directory may be shared by several runs (``checkpoint.dir``): each store has an
owner (the run id, recorded as ``run_id`` in every manifest it writes, and in its staging
directories' names ``.staging-<owner>-<name>``), and rotation deletes only the checkpoints and
staging directories of its owners (the run and the runs it resumed, see ``owners``).

Loading verifies the manifest and every file against it; :func:`latest_valid` walks a rotation
directory from newest to oldest and skips (with a warning) any checkpoint that fails.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from replay.persist.npyio import CheckpointError, fsync_dir

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# The manifest's HMAC, when the run signs its checkpoints (services.checkpoints.trust).
SIGNATURE = "manifest.sig"
PREFIX = "ckpt-"


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (disk full, I/O error); the message names the path."""


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """SHA-256 hex digest of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fsync_tree(root: Path) -> None:
    """Flushes to disk every file and directory under ``root`` (and ``root`` itself)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def list_files(root: Path) -> list[str]:
    """Relative paths of every file under ``root`` except the manifest and its signature."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.name not in (MANIFEST, SIGNATURE)
    )


class CheckpointStore:
    """A rotation directory of checkpoints.

    Args:
        root: The rotation directory (created if missing).
        keep: Newest complete checkpoints of its owners kept after each save.
        owner: The run writing here (default: an id of this store alone); rotation touches
            only checkpoints whose manifest names one of ``owners`` (this one at first).
        key: Signs each checkpoint's manifest with this HMAC key (``manifest.sig``,
            ``services.checkpoints.trust``); None: unsigned.

    Examples:
        >>> store = CheckpointStore(tmp_path, keep=2)  # doctest: +SKIP
        >>> staging = store.stage(frames=1000)  # doctest: +SKIP
        >>> (staging / "driver.json").write_text("{}")  # doctest: +SKIP
        >>> path = store.commit(staging, config_digest="...", counters={})  # doctest: +SKIP
    """

    def __init__(
        self, root: str | Path, keep: int = 3, *, owner: str | None = None, key: bytes | None = None
    ) -> None:
        self.root = Path(root)
        self.key = key
        self.keep = keep
        self.owner = owner or f"store-{uuid.uuid4().hex[:12]}"
        self.owners = {self.owner}
        self._owner_of: dict[str, str | None] = {}
        self.root.mkdir(parents=True, exist_ok=True)

    def checkpoints(self) -> list[Path]:
        """Complete-looking checkpoint directories (of every run), oldest first."""
        found = [p for p in self.root.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]
        return sorted(found, key=lambda p: p.name)

    def own(self) -> list[Path]:
        """The checkpoints written by one of ``owners``, oldest first."""
        return [p for p in self.checkpoints() if self._written_by(p) in self.owners]

    def _written_by(self, path: Path) -> str | None:
        """The ``run_id`` of a checkpoint's manifest (None: none or unreadable)."""
        if path.name not in self._owner_of:
            try:
                owner = json.loads((path / MANIFEST).read_text()).get("run_id")
            except (OSError, ValueError, AttributeError):
                return None  # not complete yet, or not ours to judge: asked again next time
            self._owner_of[path.name] = owner
        return self._owner_of[path.name]

    def stage(self, frames: int) -> Path:
        """Creates and returns a fresh staging directory for a checkpoint at ``frames``."""
        existing = {p.name for p in self.checkpoints()}
        n = 0
        while f"{PREFIX}{frames:012d}-{n}" in existing:
            n += 1
        name = f"{PREFIX}{frames:012d}-{n}"
        staging = self.root / f"{self._staging_prefix()}{name}"
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        return staging

    def commit(self, staging: Path, *, config_digest: str, counters: dict) -> Path:
        """Writes the manifest last, fsyncs, renames into place and rotates.

        Returns:
            The final checkpoint directory.
        """
        fsync_tree(staging)
        files = {
            rel: {"size": (staging / rel).stat().st_size, "sha256": sha256_file(staging / rel)}
            for rel in list_files(staging)
        }
        manifest = {
            "format_version": FORMAT_VERSION,
            "created_unix": time.time(),
            "config_digest": config_digest,
            "run_id": self.owner,
            "counters": counters,
            "files": files,
        }
        manifest_path = staging / MANIFEST
        with manifest_path.open("w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if self.key is not None:
            from services.checkpoints.trust import sign

            sign(staging, self.key)
        final = self.root / staging.name.removeprefix(self._staging_prefix())
        os.rename(staging, final)
        fsync_dir(self.root)
        self.rotate()
        return final

    def abort(self, staging: Path) -> None:
        """Removes a staging directory after a failed save."""
        shutil.rmtree(staging, ignore_errors=True)

    def rotate(self) -> None:
        """Deletes its owners' oldest checkpoints beyond ``keep`` and its stale staging dirs."""
        for old in self.own()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        self.remove_staging()

    def remove_staging(self) -> None:
        """Removes the staging directories this store left (a crash or failure mid-save)."""
        for staging in self.root.glob(f"{self._staging_prefix()}*"):
            shutil.rmtree(staging, ignore_errors=True)

    def _staging_prefix(self) -> str:
        return f".staging-{self.owner}-"


def verify(path: str | Path) -> dict:
    """Checks a checkpoint directory against its manifest and returns the manifest.

    Raises:
        CheckpointError: Naming the manifest or the first file that is missing, of the wrong
            size, or whose checksum differs; or an unknown format version.
    """
    path = Path(path)
    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{manifest_path}: missing (incomplete checkpoint)") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{manifest_path}: unreadable ({err})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{manifest_path}: not a relayrl manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{manifest_path}: format version {manifest.get('format_version')!r}, "
            f"this relayrl reads {FORMAT_VERSION}"
        )
    listed = manifest["files"]
    for rel, info in listed.items():
        file = path / rel
        if not file.is_file():
            raise CheckpointError(f"{file}: missing")
        size = file.stat().st_size
        if size != info.get("size"):
            raise CheckpointError(f"{file}: size {size} bytes, manifest says {info.get('size')}")
        if sha256_file(file) != info.get("sha256"):
            raise CheckpointError(f"{file}: checksum differs from the manifest")
    extra = sorted(set(list_files(path)) - set(listed))
    if extra:
        raise CheckpointError(f"{path / extra[0]}: not listed in the manifest")
    return manifest


def latest_valid(path: str | Path) -> tuple[Path, dict]:
    """Resolves ``path`` (a checkpoint or a rotation directory) to a verified checkpoint.

    A rotation directory yields its newest checkpoint that verifies; each newer one that fails
    is logged as a warning and skipped.

    Raises:
        CheckpointError: If ``path`` is a checkpoint that fails, or holds no valid checkpoint.
    """
    path = Path(path)
    if (path / MANIFEST).exists() or path.name.startswith(PREFIX):
        return path, verify(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint or rotation directory")
    candidates = CheckpointStore(path).checkpoints() if path.exists() else []
    errors = []
    for candidate in reversed(candidates):
        try:
            return candidate, verify(candidate)
        except CheckpointError as err:
            logger.warning("skipping invalid checkpoint: %s", err)
            errors.append(str(err))
    detail = f"; newest error: {errors[0]}" if errors else ""
    raise CheckpointError(f"{path}: no valid checkpoint{detail}")


def write_json(path: Path, data: dict) -> None:
    """Writes JSON (the checkpoint's counters and small states)."""
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def read_json(path: Path) -> dict:
    """Reads a checkpoint JSON file, naming the file on failure."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: unreadable ({err})") from None
