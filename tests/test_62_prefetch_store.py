"""The node's model store trusts only what the agent itself published.

Someone who can create folders under the weights path (a pod with a writable hostPath, say)
could plant DEST/NAME/DIGEST with an empty READY ahead of the agent. The planted folder must
neither count as a complete version (no node label) nor survive the agent's publish.
"""

from __future__ import annotations

import json
from pathlib import Path

from sealift.prefetch.model_store import ModelStore
from sealift.prefetch.node_label import complete_versions

HEX = "ab" * 32


def staged(store: ModelStore) -> None:
    store.staging.mkdir(parents=True)
    (store.staging / "model.safetensors").write_bytes(b"verified bytes")


def test_a_planted_folder_is_not_a_version_and_is_replaced_by_the_verified_copy(
    tmp_path: Path,
) -> None:
    store = ModelStore(tmp_path, "m", HEX)
    store.final.mkdir(parents=True)
    (store.final / "READY").write_text("")
    (store.final / "model.safetensors").write_bytes(b"planted")
    assert store.ready_record() is None
    assert complete_versions(tmp_path, "m") == []
    staged(store)
    store.publish({"manifestDigest": f"sha256:{HEX}", "name": "m"})
    assert (store.final / "model.safetensors").read_bytes() == b"verified bytes"
    assert store.ready_record() == {"manifestDigest": f"sha256:{HEX}", "name": "m"}
    assert complete_versions(tmp_path, "m") == [f"sha256:{HEX}"]
    assert not any(p.name.startswith("discard-") for p in (tmp_path / ".staging").iterdir())


def test_a_ready_record_for_another_digest_or_a_link_is_not_trusted(tmp_path: Path) -> None:
    store = ModelStore(tmp_path, "m", HEX)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "READY").write_text(json.dumps({"manifestDigest": f"sha256:{HEX}"}))
    store.model_dir.mkdir(parents=True)
    store.final.symlink_to(elsewhere)
    assert store.ready_record() is None
    staged(store)
    store.publish({"manifestDigest": f"sha256:{HEX}"})
    assert not store.final.is_symlink()
    assert elsewhere.exists()  # the link went, not what it pointed at
    other = ModelStore(tmp_path, "m", "cd" * 32)
    other.final.mkdir(parents=True)
    (other.final / "READY").write_text(json.dumps({"manifestDigest": f"sha256:{HEX}"}))
    assert other.ready_record() is None
    assert complete_versions(tmp_path, "m") == [f"sha256:{HEX}"]
