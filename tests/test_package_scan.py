"""Tests for sealift.bundles.package_scan: streaming layer scans and overlay merging."""

from __future__ import annotations

import gzip
import io
import tarfile
import threading
import tracemalloc
from collections.abc import Iterable

import pytest
from packageurl import PackageURL

from sealift.bundles.package_scan import (
    BackgroundLayerScanner,
    FoundPackage,
    LayerScan,
    LayerScanError,
    UnsupportedLayer,
    merge_image_packages,
    scan_layer,
)

OCI_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_TAR = "application/vnd.oci.image.layer.v1.tar"
DOCKER_GZ = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"

DPKG_STATUS = b"""\
Package: base-files
Status: install ok installed
Priority: required
Architecture: amd64
Version: 12.4+deb12u5
Description: Debian base system miscellaneous files
 This package contains the basic filesystem hierarchy.

Package: libstdc++6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 12.2.0-14
Description: GNU Standard C++ Library v3

Package: oldpkg
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
"""

DPKG_STATUS_V2 = b"""\
Package: base-files
Status: install ok installed
Architecture: amd64
Version: 12.4+deb12u6

Package: curl
Status: install ok installed
Architecture: amd64
Version: 7.88.1-10+deb12u5
"""

APK_INSTALLED = b"""\
C:Q1abc=
P:musl
V:1.2.4_git20230717-r4
A:x86_64
S:383152
F:lib
R:ld-musl-x86_64.so.1

C:Q1def=
P:busybox
V:1.36.1-r15
A:x86_64
"""

SITE = "usr/local/lib/python3.11/site-packages"


def metadata(name: str, version: str) -> bytes:
    return (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: test\n\n"
        "Long description: Name: not-a-header\n"
    ).encode()


Entry = tuple[str, bytes] | tuple[str, bytes, str]


def make_layer(entries: Iterable[Entry], *, compress: bool = True) -> bytes:
    """Build a layer tar in memory; an entry's optional third item is a hard-link target."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry[0])
            if len(entry) == 3:
                info.type = tarfile.LNKTYPE
                info.linkname = entry[2]
                archive.addfile(info)
                continue
            info.size = len(entry[1])
            info.mtime = 0
            archive.addfile(info, io.BytesIO(entry[1]))
    data = raw.getvalue()
    return gzip.compress(data, mtime=0) if compress else data


BASE_LAYER = [
    ("./var/lib/dpkg/status", DPKG_STATUS),
    ("lib/apk/db/installed", APK_INSTALLED),
    (f"{SITE}/Requests-2.31.0.dist-info/METADATA", metadata("Requests", "2.31.0")),
    (f"{SITE}/Requests-2.31.0.dist-info/RECORD", b"junk"),
    (f"{SITE}/zope.interface-6.0.dist-info/METADATA", metadata("zope.interface", "6.0")),
    (f"{SITE}/pip/_vendor/vendored-1.0.dist-info/METADATA", metadata("vendored", "1.0")),
    ("usr/lib/python3/dist-packages/six-1.16.0.egg-info/PKG-INFO", metadata("six", "1.16.0")),
    ("usr/lib/python3/dist-packages/chardet-3.0.egg-info", metadata("chardet", "3.0")),
    ("usr/bin/something", b"\x7fELF" + b"\0" * 5000),
]


def test_purls_match_packageurl_library() -> None:
    deb = FoundPackage("deb", "libstdc++6", "1:12.2.0-14+b1~x", "amd64")
    apk = FoundPackage("apk", "musl", "1.2.4_git20230717-r4", "x86_64")
    pypi = FoundPackage("pypi", "Zope.Interface", "6.0+local")
    assert deb.purl == "pkg:deb/debian/libstdc%2B%2B6@1:12.2.0-14%2Bb1~x?arch=amd64"
    assert apk.purl == "pkg:apk/alpine/musl@1.2.4_git20230717-r4?arch=x86_64"
    assert pypi.purl == "pkg:pypi/zope-interface@6.0%2Blocal"
    for package in (deb, apk, pypi):
        assert PackageURL.from_string(package.purl).to_string() == package.purl


def test_found_package_rejects_unknown_ecosystem() -> None:
    with pytest.raises(ValueError):
        FoundPackage("rpm", "bash", "5")


def test_path_is_not_part_of_identity() -> None:
    assert FoundPackage("pypi", "a", "1", path="x") == FoundPackage("pypi", "a", "1", path="y")


def test_scan_gzip_layer_finds_everything() -> None:
    scan = scan_layer(io.BytesIO(make_layer(BASE_LAYER)), OCI_GZ)
    assert scan.dpkg is not None
    assert [(p.name, p.version, p.arch) for p in scan.dpkg] == [
        ("base-files", "12.4+deb12u5", "amd64"),
        ("libstdc++6", "12.2.0-14", "amd64"),
    ]
    assert scan.apk is not None
    assert [(p.name, p.version, p.arch) for p in scan.apk] == [
        ("busybox", "1.36.1-r15", "x86_64"),
        ("musl", "1.2.4_git20230717-r4", "x86_64"),
    ]
    assert [(p.name, p.version) for p in scan.python] == [
        ("chardet", "3.0"),
        ("Requests", "2.31.0"),
        ("six", "1.16.0"),
        ("zope.interface", "6.0"),
    ]
    assert {p.purl for p in scan.python} >= {"pkg:pypi/requests@2.31.0"}
    assert scan.whiteouts == ()
    assert "var/lib/dpkg/status" in scan.sources
    assert scan.skipped == ()


@pytest.mark.parametrize(
    ("media_type", "compress"),
    [
        (OCI_TAR, False),
        (DOCKER_GZ, True),
        ("application/vnd.docker.image.rootfs.diff.tar", False),
        # Mislabelled: plain tar served as gzip still scans.
        (OCI_GZ, False),
    ],
)
def test_scan_other_media_types(media_type: str, compress: bool) -> None:
    layer = make_layer(BASE_LAYER, compress=compress)
    scan = scan_layer(io.BytesIO(layer), media_type)
    assert scan == scan_layer(io.BytesIO(make_layer(BASE_LAYER)), OCI_GZ)


def test_layer_without_databases_reports_none() -> None:
    scan = scan_layer(io.BytesIO(make_layer([("etc/hostname", b"x")])), OCI_GZ)
    assert scan == LayerScan(dpkg=None, apk=None, python=(), whiteouts=())


def test_empty_status_file_is_an_empty_database_not_none() -> None:
    scan = scan_layer(io.BytesIO(make_layer([("var/lib/dpkg/status", b"")])), OCI_GZ)
    assert scan.dpkg == ()


def test_distroless_status_d() -> None:
    layer = make_layer(
        [
            (
                "var/lib/dpkg/status.d/base",
                b"Package: base-files\nVersion: 12.4\nArchitecture: amd64\n",
            ),
            ("var/lib/dpkg/status.d/base.md5sums", b"d41d8cd98f00b204e9800998ecf8427e  etc/x\n"),
            (
                "var/lib/dpkg/status.d/tzdata",
                b"Package: tzdata\nVersion: 2024a-0\nArchitecture: all\n",
            ),
        ]
    )
    scan = scan_layer(io.BytesIO(layer), OCI_GZ)
    assert scan.dpkg is not None
    assert [(p.name, p.arch) for p in scan.dpkg] == [("base-files", "amd64"), ("tzdata", "all")]


def test_large_files_are_skipped_with_a_reason() -> None:
    scan = scan_layer(io.BytesIO(make_layer(BASE_LAYER)), OCI_GZ, max_file_size=300)
    assert scan.dpkg is None
    assert scan.apk is not None
    assert any(s.startswith("var/lib/dpkg/status: ") and "limit" in s for s in scan.skipped)


def test_hard_link_to_metadata_is_resolved() -> None:
    target = f"{SITE}/a-1.dist-info/METADATA"
    link = "opt/venv/lib/python3.11/site-packages/a-1.dist-info/METADATA"
    scan = scan_layer(
        io.BytesIO(make_layer([(target, metadata("a", "1")), (link, b"", target)])), OCI_GZ
    )
    assert sorted(p.path for p in scan.python) == sorted([target, link])


def test_whiteouts_and_merge() -> None:
    base = scan_layer(io.BytesIO(make_layer(BASE_LAYER)), OCI_GZ)
    upper = scan_layer(
        io.BytesIO(
            make_layer(
                [
                    ("var/lib/dpkg/status", DPKG_STATUS_V2),
                    (f"{SITE}/.wh.Requests-2.31.0.dist-info", b""),
                    (f"{SITE}/requests-2.32.3.dist-info/METADATA", metadata("requests", "2.32.3")),
                    ("usr/lib/python3/dist-packages/.wh..wh..opq", b""),
                    ("lib/apk/.wh.db", b""),
                ]
            )
        ),
        OCI_GZ,
    )
    assert upper.whiteouts == (
        "lib/apk/db",
        "usr/lib/python3/dist-packages/",
        f"{SITE}/Requests-2.31.0.dist-info",
    )
    merged = merge_image_packages([base, upper])
    assert [(p.ecosystem, p.name, p.version) for p in merged] == [
        ("deb", "base-files", "12.4+deb12u6"),
        ("deb", "curl", "7.88.1-10+deb12u5"),
        ("pypi", "requests", "2.32.3"),
        ("pypi", "zope.interface", "6.0"),
    ]
    # Order matters: the same two layers the other way round give the old view.
    flipped = merge_image_packages([upper, base])
    assert ("pypi", "Requests", "2.31.0") in [(p.ecosystem, p.name, p.version) for p in flipped]
    assert ("deb", "curl", "7.88.1-10+deb12u5") not in [
        (p.ecosystem, p.name, p.version) for p in flipped
    ]


def test_whiteout_of_status_file_removes_dpkg() -> None:
    base = scan_layer(io.BytesIO(make_layer(BASE_LAYER)), OCI_GZ)
    upper = scan_layer(io.BytesIO(make_layer([("var/lib/dpkg/.wh.status", b"")])), OCI_GZ)
    assert not any(p.ecosystem == "deb" for p in merge_image_packages([base, upper]))


def test_emptied_status_file_overrides_lower_layer() -> None:
    base = scan_layer(io.BytesIO(make_layer(BASE_LAYER)), OCI_GZ)
    upper = scan_layer(io.BytesIO(make_layer([("var/lib/dpkg/status", b"")])), OCI_GZ)
    assert not any(p.ecosystem == "deb" for p in merge_image_packages([base, upper]))


def test_merge_deduplicates_and_sorts() -> None:
    one = LayerScan(
        dpkg=None,
        apk=None,
        whiteouts=(),
        python=(
            FoundPackage("pypi", "b", "1", path="x/site-packages/b-1.dist-info/METADATA"),
            FoundPackage("pypi", "a", "1", path="y/site-packages/a-1.dist-info/METADATA"),
        ),
    )
    two = LayerScan(
        dpkg=None,
        apk=None,
        whiteouts=(),
        python=(FoundPackage("pypi", "a", "1", path="x/site-packages/a-1.dist-info/METADATA"),),
    )
    merged = merge_image_packages([one, two])
    assert [(p.name, p.path) for p in merged] == [
        ("a", "x/site-packages/a-1.dist-info/METADATA"),
        ("b", "x/site-packages/b-1.dist-info/METADATA"),
    ]


def test_zstd_layers_are_unsupported() -> None:
    with pytest.raises(UnsupportedLayer) as info:
        scan_layer(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"\0" * 64), OCI_ZSTD)
    assert "zstd" in info.value.reason
    # zstd bytes behind a gzip label are recognised too.
    with pytest.raises(UnsupportedLayer):
        scan_layer(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"\0" * 64), OCI_GZ)


def test_unknown_media_type_is_unsupported() -> None:
    with pytest.raises(UnsupportedLayer):
        scan_layer(io.BytesIO(b""), "application/vnd.oci.image.config.v1+json")


def test_corrupt_gzip_is_a_scan_error() -> None:
    corrupt = b"\x1f\x8b\x08\x00" + b"\xff" * 4096
    with pytest.raises(LayerScanError):
        scan_layer(io.BytesIO(corrupt), OCI_GZ)
    truncated = make_layer(BASE_LAYER)[:200]
    with pytest.raises(LayerScanError):
        scan_layer(io.BytesIO(truncated), OCI_GZ)


def feed(scanner: BackgroundLayerScanner, data: bytes, size: int) -> None:
    view = memoryview(data)
    for index, offset in enumerate(range(0, len(data), size)):
        piece = view[offset : offset + size]
        # Exercise every buffer type a copy loop might hand over.
        chunk: bytes | bytearray | memoryview = (
            bytes(piece) if index % 3 == 0 else bytearray(piece) if index % 3 == 1 else piece
        )
        scanner.write(chunk)


@pytest.mark.parametrize("chunk_size", [1, 7, 512, 65536])
def test_background_scanner_matches_scan_layer(chunk_size: int) -> None:
    layer = make_layer(BASE_LAYER)
    scanner = BackgroundLayerScanner(OCI_GZ, max_pending=2)
    feed(scanner, layer, chunk_size)
    assert scanner.finish() == scan_layer(io.BytesIO(layer), OCI_GZ)
    # finish() is idempotent.
    assert scanner.finish() == scan_layer(io.BytesIO(layer), OCI_GZ)


def test_background_scanner_reads_trailing_bytes_after_end_of_archive() -> None:
    # Bytes after the tar end marker must be drained, or the producer would block.
    layer = make_layer(BASE_LAYER, compress=False) + b"\0" * 200_000
    scanner = BackgroundLayerScanner(OCI_TAR, max_pending=1)
    feed(scanner, layer, 1000)
    assert scanner.finish().dpkg is not None


def run_producer(scanner: BackgroundLayerScanner, chunks: Iterable[bytes]) -> threading.Thread:
    def produce() -> None:
        for chunk in chunks:
            scanner.write(chunk)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    producer.join(timeout=30)
    return producer


def test_producer_never_blocks_when_the_scanner_fails() -> None:
    scanner = BackgroundLayerScanner(OCI_GZ, max_pending=1)
    garbage = [b"\x1f\x8b\x08\x00" + b"\xff" * 1020] + [b"\xff" * 1024] * 500
    producer = run_producer(scanner, garbage)
    assert not producer.is_alive(), "producer blocked on a failed scanner"
    with pytest.raises(LayerScanError) as info:
        scanner.finish()
    assert not isinstance(info.value, UnsupportedLayer)


def test_zstd_background_scanner_discards_input() -> None:
    scanner = BackgroundLayerScanner(OCI_ZSTD, max_pending=1)
    producer = run_producer(scanner, [b"x" * 1024] * 100)
    assert not producer.is_alive()
    with pytest.raises(UnsupportedLayer):
        scanner.finish()


def test_abort_stops_the_worker() -> None:
    layer = make_layer(BASE_LAYER)
    scanner = BackgroundLayerScanner(OCI_GZ, max_pending=1)
    scanner.write(layer[:100])
    scanner.abort()
    with pytest.raises(LayerScanError, match="aborted"):
        scanner.finish()
    with pytest.raises(RuntimeError):
        scanner.write(b"more")


def test_context_manager_aborts_on_error() -> None:
    with pytest.raises(KeyError), BackgroundLayerScanner(OCI_GZ) as scanner:
        scanner.write(make_layer(BASE_LAYER)[:50])
        raise KeyError("copy failed")
    with pytest.raises(LayerScanError, match="aborted"):
        scanner.finish()


class _Zeros(io.RawIOBase):
    """An unseekable source of ``size`` zero bytes, so the test never builds it in memory."""

    def __init__(self, size: int) -> None:
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self._left)
        buffer[:count] = bytes(count)
        self._left -= count
        return count


def test_memory_stays_bounded_for_large_files() -> None:
    big = 64 * 1024 * 1024
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w|") as archive,
    ):
        info = tarfile.TarInfo(f"{SITE}/huge-1.dist-info/METADATA")
        info.size = big
        archive.addfile(info, _Zeros(big))
        meta = metadata("small", "1")
        info = tarfile.TarInfo(f"{SITE}/small-1.dist-info/METADATA")
        info.size = len(meta)
        archive.addfile(info, io.BytesIO(meta))
    layer = raw.getvalue()

    tracemalloc.start()
    try:
        scanner = BackgroundLayerScanner(OCI_GZ, max_pending=4)
        feed(scanner, layer, 64 * 1024)
        scan = scanner.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [p.name for p in scan.python] == ["small"]
    assert any("huge-1.dist-info" in s for s in scan.skipped)
    assert peak < 24 * 1024 * 1024, f"peak {peak} bytes"


def test_truncated_gzip_header_is_a_scan_error() -> None:
    layer = make_layer(BASE_LAYER)
    for cut in range(4, 12):
        with pytest.raises(LayerScanError):
            scan_layer(io.BytesIO(layer[:cut]), OCI_GZ)


class _FailingSource(io.RawIOBase):
    """Serves ``data`` and then fails, like a connection dropping mid-layer."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._data:
            raise OSError("connection reset")
        count = min(len(buffer), len(self._data))
        buffer[:count] = self._data[:count]
        self._data = self._data[count:]
        return count


def test_errors_from_the_source_stream_propagate() -> None:
    layer = make_layer(BASE_LAYER)
    with pytest.raises(OSError, match="connection reset"):
        scan_layer(io.BufferedReader(_FailingSource(layer[:300]), buffer_size=64), OCI_GZ)
