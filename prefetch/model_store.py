"""The node's model store: where verified weights live, and how they become visible.

```
DEST/.staging/NAME-HEX/            files being fetched, on the same filesystem as DEST
DEST/.staging/NAME-HEX/.verified/  one marker per file whose digest checked out (after fsync)
DEST/NAME/HEX/                     a complete, verified copy; HEX is the model manifest digest
DEST/NAME/HEX/READY                what was verified, against which signers, when
DEST/NAME/current -> HEX           what serving pods mount; replaced atomically
```

Nothing unverified is ever visible under ``DEST/NAME/``: a copy arrives there by one rename of
its staging folder, after every file and folder was fsynced, with READY written last inside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from sealift.durable_files import exclusive_lock, fsync_path
from sealift.errors import IntegrityError, ResourceError

STAGING = ".staging"
VERIFIED = ".verified"
READY = "READY"
CURRENT = "current"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


def check_model_name(name: str) -> str:
    """A model name becomes a folder name: refuse anything that is not a plain name."""
    if not _NAME.match(name):
        raise IntegrityError(
            f"model name {name!r} in the manifest is not a plain name",
            hint="the model manifest is damaged or malicious",
        )
    return name


@dataclass(frozen=True)
class ModelStore:
    """Paths of one model version in the store under ``dest``."""

    dest: Path
    name: str
    digest_hex: str

    @property
    def model_dir(self) -> Path:
        return self.dest / self.name

    @property
    def final(self) -> Path:
        return self.model_dir / self.digest_hex

    @property
    def staging(self) -> Path:
        return self.dest / STAGING / f"{self.name}-{self.digest_hex}"

    def staged(self, path: str) -> Path:
        """Where a file of the model is written while it is fetched."""
        return self.staging / path

    def marker(self, path: str) -> Path:
        """The marker that says a staged file was verified and fsynced."""
        return self.staging / VERIFIED / (path + ".json")

    def ready_record(self) -> dict[str, object] | None:
        """The READY record of the final copy, if it is complete and is this version's."""
        if self.final.is_symlink():
            return None  # the agent never publishes a link: someone else put it there
        try:
            record = json.loads((self.final / READY).read_text())
        except (OSError, ValueError):
            return None
        if (
            not isinstance(record, dict)
            or record.get("manifestDigest") != f"sha256:{self.digest_hex}"
        ):
            return None
        return record

    def check_space(self, needed: int) -> None:
        """Refuse to start a download the filesystem cannot hold."""
        self.dest.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.dest).free
        if free < needed:
            raise ResourceError(
                f"{self.dest} has {free} bytes free, the model needs {needed} more",
                hint="free space on the node's NVMe, or remove old model versions",
            )

    def lock(self) -> int:
        """One prefetch per model version at a time (a manual run beside the DaemonSet)."""
        self.staging.mkdir(parents=True, exist_ok=True)
        return exclusive_lock(
            self.dest / STAGING / f"{self.name}-{self.digest_hex}.lock",
            ResourceError(
                f"another prefetch is fetching {self.name} into {self.dest}",
                hint="wait for it to finish; its result will be in place for this one too",
            ),
        )

    def unlock(self, fd: int) -> None:
        """Release the lock taken by :meth:`lock`; the version is published, the file can go."""
        with contextlib.suppress(FileNotFoundError):
            (self.dest / STAGING / f"{self.name}-{self.digest_hex}.lock").unlink()
        os.close(fd)

    def publish(self, record: dict[str, object]) -> None:
        """READY last, everything fsynced, then one rename into place and ``current`` switched."""
        ready = self.staging / READY
        ready.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        fsync_path(ready)
        shutil.rmtree(self.staging / VERIFIED, ignore_errors=True)
        for folder, _, _ in os.walk(self.staging, topdown=False):
            fsync_path(Path(folder))
        self.model_dir.mkdir(parents=True, exist_ok=True)
        existing = self.ready_record() if self.final.exists() else None
        if existing is not None and existing.get("manifestDigest") == record["manifestDigest"]:
            # Another run finished the same version first: theirs is as good as ours.
            shutil.rmtree(self.staging)
        else:
            if self.final.exists() or self.final.is_symlink():
                # Something sits where only a verified copy may: not ours, not trusted. Move it
                # out of the way (never into a path a pod reads) and put the verified copy there.
                discard = (
                    self.dest / STAGING / f"discard-{self.name}-{self.digest_hex}-{os.getpid()}"
                )
                os.rename(self.final, discard)
                if discard.is_dir() and not discard.is_symlink():
                    shutil.rmtree(discard, ignore_errors=True)
                else:
                    discard.unlink()
            os.rename(self.staging, self.final)
        fsync_path(self.model_dir)
        self.point_current()

    def point_current(self) -> None:
        """Make ``current`` name this version, replacing the link atomically."""
        link = self.model_dir / CURRENT
        with contextlib.suppress(OSError):
            if os.readlink(link) == self.digest_hex:
                return
        temporary = self.model_dir / f".{CURRENT}.tmp-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        os.symlink(self.digest_hex, temporary)
        os.replace(temporary, link)
        fsync_path(self.model_dir)

    def remove_old_versions(self, keep: int) -> list[str]:
        """Delete complete versions beyond the newest ``keep`` (``current`` always stays)."""
        versions = []
        for entry in self.model_dir.iterdir():
            if entry.name in (CURRENT,) or entry.name.startswith(".") or not entry.is_dir():
                continue
            ready = entry / READY
            mtime = ready.stat().st_mtime if ready.exists() else 0.0
            versions.append((mtime, entry))
        versions.sort(reverse=True)
        removed = []
        for _, entry in versions[max(keep, 1) :]:
            if entry.name == self.digest_hex:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        return removed
