"""The shared plumbing: sizes, references, the hashing stream, retries, auth files, documents."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from sealift.docker_auth import Credentials, load_credentials
from sealift.documents import load_yaml, validate
from sealift.errors import InputError, IntegrityError, SealiftError
from sealift.hashing import EMPTY_SHA256, check_digest, copy_stream, sha256_bytes
from sealift.image_reference import parse_reference
from sealift.retry import Retryable, RetryPolicy
from sealift.units import format_bytes, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("25GiB", 25 * 1024**3), ("4G", 4 * 10**9), ("700MiB", 700 * 1024**2), ("1000", 1000)],
)
def test_sizes_parse(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1G", "0", "12 parsecs", "", "1e9"])
def test_bad_sizes_are_refused_not_guessed(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_size(text, what="--split")
    assert "--split" in caught.value.one_line() and "hint:" in caught.value.one_line()


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"


def test_references_parse_like_docker() -> None:
    ref = parse_reference("127.0.0.1:5000/vllm/vllm-openai:v0.28.0")
    assert (ref.registry, ref.repository, ref.tag) == (
        "127.0.0.1:5000",
        "vllm/vllm-openai",
        "v0.28.0",
    )
    assert parse_reference("ubuntu").repository == "library/ubuntu"
    assert parse_reference("ubuntu").registry == "docker.io"
    pinned = parse_reference("reg.corp:443/a/b@sha256:" + "a" * 64)
    assert pinned.reference == "sha256:" + "a" * 64
    assert parse_reference("vllm/x:1", local=True).name == "vllm/x:1"


@pytest.mark.parametrize("text", ["UPPER/case:1", "a//b", "a/b:bad tag", "a/b@sha256:xyz", " a/b"])
def test_bad_references_name_the_input(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_reference(text, what="images[0].ref")
    assert "images[0].ref" in str(caught.value)


def test_local_references_refuse_a_registry() -> None:
    with pytest.raises(InputError, match="names a registry"):
        parse_reference("registry.corp/x:1", local=True)


def test_digests_are_checked_before_they_name_files() -> None:
    assert check_digest(EMPTY_SHA256) == EMPTY_SHA256
    for bad in ("sha256:../../etc/passwd", "md5:abc", "sha256:" + "A" * 64):
        with pytest.raises(InputError):
            check_digest(bad)


def test_copy_stream_hashes_while_copying() -> None:
    data = b"x" * (5 * 1024 * 1024 + 7)
    sink = io.BytesIO()
    seen: list[int] = []
    result = copy_stream(io.BytesIO(data), [sink], expected_digest=sha256_bytes(data),
                         expected_size=len(data), on_bytes=seen.append)  # fmt: skip
    assert sink.getvalue() == data and result.size == len(data) and sum(seen) == len(data)


def test_copy_stream_catches_every_mismatch() -> None:
    data = b"payload"
    with pytest.raises(IntegrityError, match="has digest"):
        copy_stream(io.BytesIO(data), expected_digest=sha256_bytes(b"other"), what="layer 1")
    with pytest.raises(IntegrityError, match="7 bytes, expected 9"):
        copy_stream(io.BytesIO(data), expected_size=9)
    with pytest.raises(IntegrityError, match="longer than its declared size"):
        copy_stream(io.BytesIO(data), expected_size=3)


def test_retry_policy_retries_then_gives_up() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Retryable("HTTP 503")
        return "ok"

    policy = RetryPolicy(attempts=5, base_delay=0.01)
    assert policy.run(flaky, sleep=lambda _: None) == "ok" and len(calls) == 3
    with pytest.raises(Retryable):
        RetryPolicy(attempts=2).run(
            lambda: (_ for _ in ()).throw(Retryable("x")), sleep=lambda _: None
        )
    assert RetryPolicy().delay(1, after=3.0) == 3.0


def test_auth_file_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cret-value"
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "auths": {
                    "https://reg.corp": {"auth": base64.b64encode(f"me:{secret}".encode()).decode()}
                }
            }
        )
    )
    found = load_credentials("reg.corp", auth_file=config)
    assert found == Credentials("me", secret)
    assert secret not in repr(found)
    assert load_credentials("other.corp", auth_file=config) is None
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(config))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_credentials("reg.corp") == Credentials("me", secret)
    with pytest.raises(InputError, match="does not exist"):
        load_credentials("reg.corp", auth_file=tmp_path / "missing.json")
    config.write_text("{not json")
    with pytest.raises(InputError, match="not readable JSON"):
        load_credentials("reg.corp", auth_file=config)


def test_yaml_refuses_duplicate_keys_and_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "doc.yaml"
    path.write_text("a: 1\nb: 2\na: 3\n")
    with pytest.raises(InputError) as caught:
        load_yaml(path, what="bundle file")
    assert "duplicate key 'a'" in str(caught.value) and "line 3" in str(caught.value)


def test_schema_errors_name_the_key_path() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"ref": {"type": "string"}},
                },
            }
        },
    }
    with pytest.raises(InputError) as caught:
        validate({"items": [{"ref": "x"}, {"reff": "y"}]}, schema, source="f.yaml")
    text = caught.value.one_line()
    assert text.startswith("f.yaml: items[1].reff:") and "allowed keys here: ref" in text


def test_errors_are_one_line() -> None:
    error = SealiftError("first\nsecond", hint="do\nthis")
    assert "\n" not in error.one_line() and error.one_line() == "first second (hint: do this)"
