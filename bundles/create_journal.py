"""The resume journal of a tar create: what an interrupted run made durable, and its hashes.

A tar is one sequential stream, so resuming means knowing how far it is durable (the last full
part, or the last fsync of a single tar) and the digests and package scans of the entries before
that point, which a re-run then does not read again. The journal sits beside the output as
``NAME.tar.journal.json`` and is removed when the bundle is complete.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sealift.bundles import layout
from sealift.bundles.package_scan import FoundPackage, LayerScan
from sealift.durable_files import write_atomically
from sealift.errors import InputError


def _scan_to_dict(scan: LayerScan) -> dict[str, Any]:
    return asdict(scan)


def _packages(items: list[dict[str, Any]] | None) -> tuple[FoundPackage, ...] | None:
    if items is None:
        return None
    return tuple(FoundPackage(**item) for item in items)


def _scan_from_dict(data: dict[str, Any]) -> LayerScan:
    return LayerScan(
        dpkg=_packages(data["dpkg"]),
        apk=_packages(data["apk"]),
        python=_packages(data["python"]) or (),
        whiteouts=tuple(data["whiteouts"]),
        sources=tuple(data.get("sources", ())),
        skipped=tuple(data.get("skipped", ())),
    )


@dataclass
class CreateJournal:
    """Durable progress of one tar create, keyed by the plan it was made for."""

    path: Path
    plan_key: str
    offset: int = 0
    parts: list[dict[str, object]] = field(default_factory=list)
    digests: dict[int, str] = field(default_factory=dict)
    scans: dict[str, LayerScan | None] = field(default_factory=dict)

    @classmethod
    def for_output(cls, output: Path, plan_key: str) -> CreateJournal:
        """The journal of ``output``: loaded when an interrupted run left one, else new."""
        path = output.with_name(output.name + layout.JOURNAL_SUFFIX)
        if not path.exists():
            return cls(path=path, plan_key=plan_key)
        try:
            data = json.loads(path.read_text())
            journal = cls(
                path=path,
                plan_key=data["planKey"],
                offset=int(data["offset"]),
                parts=list(data["parts"]),
                digests={int(k): v for k, v in data["digests"].items()},
                scans={
                    k: (_scan_from_dict(v) if v is not None else None)
                    for k, v in data["scans"].items()
                },
            )
        except (OSError, ValueError, KeyError, TypeError) as bad:
            raise InputError(
                f"resume journal {path} is unreadable ({type(bad).__name__})",
                hint=f"remove {output.name}.* and run create again",
            ) from bad
        if journal.plan_key != plan_key:
            raise InputError(
                f"{output} was started from different inputs (resume journal {path.name})",
                hint=f"remove {output.name}.* to start over, or restore the original inputs",
            )
        for part in journal.parts:
            candidate = output.with_name(str(part["name"]))
            if not candidate.is_file() or candidate.stat().st_size != part["size"]:
                raise InputError(
                    f"part {candidate} recorded by the resume journal is missing or changed",
                    hint=f"remove {output.name}.* and run create again",
                )
        return journal

    @property
    def resuming(self) -> bool:
        """Whether an interrupted run left durable content to continue from."""
        return self.offset > 0

    def save(self) -> None:
        """Write the journal atomically."""
        document = {
            "planKey": self.plan_key,
            "offset": self.offset,
            "parts": self.parts,
            "digests": {str(k): v for k, v in sorted(self.digests.items())},
            "scans": {
                k: (_scan_to_dict(v) if v is not None else None)
                for k, v in sorted(self.scans.items())
            },
        }
        write_atomically(self.path, json.dumps(document, sort_keys=True).encode())

    def remove(self) -> None:
        """Forget the journal once the bundle is complete."""
        self.path.unlink(missing_ok=True)
