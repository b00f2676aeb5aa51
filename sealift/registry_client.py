"""The one OCI distribution client: auth, TLS, retries, manifests and streaming blobs.

Used to pull at ``bundle create`` and to push at ``install``. Blobs stream through a reader that
resumes an interrupted download with a Range request, so the caller's hash keeps running across
retries and nothing is buffered whole. TLS verification is passed on every request: requests
ignores ``Session.verify`` when REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE is set.
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter

from sealift import media_types
from sealift.docker_auth import Credentials
from sealift.errors import InputError, IntegrityError, RemoteError
from sealift.hashing import copy_stream, sha256_bytes
from sealift.retry import Retryable, RetryPolicy

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')
_NETWORK_ERRORS = (
    requests.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.Timeout,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.ReadTimeoutError,
    ConnectionError,
)


class _LargeBlockAdapter(HTTPAdapter):
    """Sends request bodies in 1 MiB blocks instead of http.client's 8 KiB."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["blocksize"] = 1 << 20
        super().init_poolmanager(*args, **kwargs)


class _Limited:
    """At most ``count`` bytes of a stream, as a request body."""

    def __init__(self, source: Any, count: int) -> None:
        self._source = source
        self._left = count

    def read(self, count: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        want = self._left if count is None or count < 0 else min(count, self._left)
        data = self._source.read(want)
        self._left -= len(data)
        return data


class HashingBody:
    """A request body that hashes what it sends: a blob is read once, verified as it leaves.

    ``len()`` gives requests the Content-Length, so the upload is one monolithic PUT.
    """

    def __init__(
        self,
        source: Any,
        size: int,
        *,
        on_bytes: Callable[[int], None] | None = None,
        hasher: Any = None,
    ) -> None:
        self._source = source
        self._size = size
        # A chunk of a larger blob feeds the blob's running hash (restored on a failed chunk).
        self._hasher = hasher if hasher is not None else hashlib.sha256()
        self.sent = 0
        self._on_bytes = on_bytes

    def __len__(self) -> int:
        return self._size

    def read(self, count: int = -1) -> bytes:
        data = self._source.read(count if count and count > 0 else 1 << 20)
        if data:
            self._hasher.update(data)
            self.sent += len(data)
            if self._on_bytes is not None:
                self._on_bytes(len(data))
        return data

    @property
    def digest(self) -> str:
        """Digest of the bytes sent so far."""
        return "sha256:" + self._hasher.hexdigest()


@dataclass(frozen=True)
class Manifest:
    """A manifest or index exactly as the registry served it; its digest is of these bytes."""

    content: bytes = field(repr=False)
    media_type: str
    digest: str


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None


class RegistryClient:
    """A client for one registry host. Thread-safe: workers share its connection pool."""

    def __init__(
        self,
        registry: str,
        *,
        plain_http: bool = False,
        ca_file: str | None = None,
        credentials: Credentials | None = None,
        retry: RetryPolicy | None = None,
        connections: int = 8,
        timeout: tuple[float, float] = (10.0, 120.0),
        chunk_size: int = 256 * 1024 * 1024,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.registry = registry
        self.base_url = f"{'http' if plain_http else 'https'}://{registry}"
        self.plain_http = plain_http
        self._verify: bool | str = True if ca_file is None else ca_file
        self._credentials = credentials
        self.retry = retry or RetryPolicy()
        self._timeout = timeout
        # Blobs larger than this go up in PATCH chunks (0: always one PUT).
        self.chunk_size = chunk_size
        # Everyone who wants to hear about retries (the progress notes, a concurrency limit).
        self.retry_listeners: list[Callable[[str], None]] = [on_retry] if on_retry else []
        self._session = requests.Session()
        adapter = _LargeBlockAdapter(pool_connections=2, pool_maxsize=max(connections, 2))
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._session.headers["User-Agent"] = "sealift"
        self._tokens: dict[str, str] = {}
        self._basic = False
        self._lock = threading.Lock()

    # -- plumbing -----------------------------------------------------------------------------

    def _fail_network(self, problem: BaseException) -> RemoteError:
        text = str(problem)
        # A plain-http server answering a TLS hello also raises SSLError: test for it first.
        if "wrong version number" in text or "record layer failure" in text:
            return RemoteError(
                f"registry {self.registry} does not speak TLS",
                hint=f"if it is a plain-http registry, pass --plain-http {self.registry}",
            )
        if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(problem, requests.exceptions.SSLError):
            return RemoteError(
                f"registry {self.registry}: TLS certificate not trusted",
                hint="pass the registry's CA with --ca-file, or --plain-http HOST for plain http",
            )
        reason = type(problem).__name__
        if "Connection refused" in text:
            reason = "connection refused"
        elif isinstance(problem, requests.Timeout):
            reason = "timed out"
        return RemoteError(
            f"registry {self.registry} is unreachable ({reason})",
            hint="check the address, the port and that the registry is running",
        )

    def _refused(self) -> RemoteError:
        return RemoteError(
            f"registry {self.registry} refused the credentials",
            hint="log in again (docker login, podman login or --username with --password-stdin)",
        )

    def _forget_token(self, scope: str, sent: str | None = None) -> None:
        """Drop a cached token; with ``sent``, only if it is still the one that was refused
        (another worker may already have fetched a fresh one)."""
        with self._lock:
            if sent is None or self._tokens.get(scope) == sent:
                self._tokens.pop(scope, None)

    def _tell(self, text: str) -> None:
        for listener in list(self.retry_listeners):
            listener(text)

    def _auth_header(self, scope: str) -> dict[str, str]:
        with self._lock:
            token = self._tokens.get(scope)
            if token:
                return {"Authorization": f"Bearer {token}"}
            if self._basic and self._credentials:
                return {}
        return {}

    def _basic_auth(self) -> tuple[str, str] | None:
        if self._basic and self._credentials:
            return (self._credentials.username, self._credentials.password)
        return None

    def _authenticate(self, response: requests.Response, scope: str) -> None:
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if not self._credentials:
                raise RemoteError(
                    f"registry {self.registry} requires a login",
                    hint="docker login / podman login, or pass --authfile",
                )
            with self._lock:
                self._basic = True
            return
        if scheme != "bearer":
            raise RemoteError(
                f"registry {self.registry} asks for unsupported auth {scheme or 'none'!r}",
                hint="sealift speaks basic and bearer-token auth",
            )
        params = dict(_CHALLENGE_PARAM.findall(challenge))
        realm = params.get("realm")
        if not realm:
            raise RemoteError(f"registry {self.registry} sent a bearer challenge without a realm")
        query = {"service": params.get("service", ""), "scope": params.get("scope") or scope}
        auth = None
        try:
            answer = self._ask_token_service(realm, query, auth)
        except _NETWORK_ERRORS as problem:
            raise RemoteError(
                f"registry {self.registry}: its token service {realm} is unreachable"
                f" ({type(problem).__name__})",
                hint="check that the token service's address and CA are reachable from here",
            ) from problem
        if answer.status_code in (401, 403):
            raise self._refused()
        if answer.status_code != 200:
            raise RemoteError(
                f"registry {self.registry}: token service answered {answer.status_code}",
                hint="check the registry's auth service",
            )
        try:
            body = answer.json()
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError) as bad:
            raise RemoteError(
                f"registry {self.registry}: the token service's answer is not a token",
                hint="check the registry's auth service",
            ) from bad
        if not token:
            raise RemoteError(f"registry {self.registry}: token service sent no token")
        with self._lock:
            self._tokens[scope] = token

    def _ask_token_service(
        self, realm: str, query: dict[str, str], auth: tuple[str, str] | None
    ) -> requests.Response:
        if self._credentials and self._credentials.identity_token:
            answer = self._session.post(
                realm,
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": self._credentials.identity_token,
                    "client_id": "sealift",
                    **query,
                },
                verify=self._verify,
                timeout=self._timeout,
            )
        else:
            if self._credentials:
                auth = (self._credentials.username, self._credentials.password)
            answer = self._session.get(
                realm, params=query, auth=auth, verify=self._verify, timeout=self._timeout
            )
        return answer

    def request(
        self,
        method: str,
        path: str,
        *,
        scope: str,
        ok: tuple[int, ...] = (200,),
        headers: dict[str, str] | None = None,
        stream: bool = False,
        data: Any = None,
        what: str = "",
    ) -> requests.Response:
        """Send one request with auth and retries; return a response whose status is in ``ok``.

        ``data`` must be re-sendable (bytes or a factory's result) because a retry sends it again.
        Statuses outside ``ok`` that are not transient are returned too when listed by the caller
        through ``ok``; everything else becomes a :class:`RemoteError`.
        """
        url = path if path.startswith("http") else self.base_url + path

        def attempt() -> requests.Response:
            refreshed = False
            for _ in range(3):  # later passes run after an auth challenge was answered
                all_headers = {**self._auth_header(scope), **(headers or {})}
                body = data() if callable(data) else data
                try:
                    response = self._session.request(
                        method,
                        url,
                        headers=all_headers,
                        auth=self._basic_auth(),
                        data=body,
                        stream=stream,
                        verify=self._verify,
                        timeout=self._timeout,
                        allow_redirects=True,
                    )
                except requests.exceptions.SSLError as problem:
                    raise self._fail_network(problem) from problem
                except _NETWORK_ERRORS as problem:
                    if "Connection refused" in str(problem) and method != "PATCH":
                        raise self._fail_network(problem) from problem
                    raise Retryable(f"{type(problem).__name__}") from problem
                if response.status_code == 401 and 401 not in ok:
                    response.close()
                    if self._basic or refreshed:
                        # Credentials were sent and refused: asking again will not help.
                        raise self._refused()
                    # No token yet, or an expired one: ask the token service (once).
                    sent = all_headers.get("Authorization", "").removeprefix("Bearer ")
                    self._forget_token(scope, sent or None)
                    self._authenticate(response, scope)
                    refreshed = "Authorization" in all_headers or self._tokens.get(scope) is None
                    continue
                if response.status_code in ok:
                    return response
                response.close()
                if response.status_code in _TRANSIENT_STATUS:
                    raise Retryable(f"HTTP {response.status_code}", after=_retry_after(response))
                if response.status_code in (401, 403):
                    raise RemoteError(
                        f"registry {self.registry} denied {method} {what or path}"
                        f" (HTTP {response.status_code})",
                        hint="check that the credentials have the right permissions",
                    )
                raise RemoteError(
                    f"registry {self.registry}: {method} {what or path} failed"
                    f" with HTTP {response.status_code}",
                    hint="check the reference and the registry's logs",
                )
            raise self._refused()

        def note(attempt_number: int, problem: Retryable) -> None:
            self._tell(f"{self.registry}: {problem.reason}, retry {attempt_number}")

        try:
            return self.retry.run(attempt, on_retry=note)
        except Retryable as problem:
            cause = problem.__cause__
            if isinstance(cause, BaseException) and not isinstance(cause, Retryable):
                raise self._fail_network(cause) from problem
            raise RemoteError(
                f"registry {self.registry}: {method} {what or path} still failing after"
                f" {self.retry.attempts} attempts ({problem.reason})",
                hint="the registry is overloaded or failing; try again later",
            ) from problem

    # -- reading ------------------------------------------------------------------------------

    def ping(self) -> None:
        """Check that the registry answers the distribution API and accepts the credentials."""
        self.request("GET", "/v2/", scope="", what="/v2/")

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        """Fetch a manifest or index by tag or digest; a digest reference is verified."""
        response = self.request(
            "GET",
            f"/v2/{repository}/manifests/{reference}",
            scope=f"repository:{repository}:pull",
            headers={"Accept": media_types.MANIFEST_ACCEPT},
            ok=(200, 404),
            what=f"{repository}:{reference}",
        )
        if response.status_code == 404:
            raise InputError(
                f"image {self.registry}/{repository}:{reference} not found",
                hint="check the repository and tag with skopeo list-tags or the registry's UI",
            )
        content = response.content
        if len(content) > MAX_MANIFEST_BYTES:
            raise IntegrityError(f"manifest of {repository}:{reference} is too large")
        digest = sha256_bytes(content)
        if reference.startswith("sha256:") and digest != reference:
            raise IntegrityError(
                f"registry {self.registry} served {repository}@{reference} with digest {digest}",
                hint="the registry or a proxy altered the manifest",
            )
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return Manifest(content=content, media_type=media_type, digest=digest)

    def blob_size(self, repository: str, digest: str) -> int | None:
        """Size of a blob if the registry has it in ``repository``, else None (HEAD)."""
        response = self.request(
            "HEAD",
            f"/v2/{repository}/blobs/{digest}",
            scope=f"repository:{repository}:pull",
            ok=(200, 404),
            what=f"blob {digest}",
        )
        if response.status_code == 404:
            return None
        return int(response.headers.get("Content-Length", "0"))

    def open_blob(self, repository: str, digest: str, size: int) -> io.RawIOBase:
        """A streaming reader for a blob that resumes by Range after a dropped connection."""
        return _ResumingBlobReader(self, repository, digest, size)

    def read_blob(self, repository: str, digest: str, size: int, *, what: str) -> bytes:
        """A small blob (a chart, a config, a signature) whole, its digest and size checked."""
        sink = io.BytesIO()
        with self.open_blob(repository, digest, size) as reader:
            copy_stream(
                reader,  # type: ignore[arg-type]
                (sink,),
                expected_digest=digest,
                expected_size=size,
                what=what,
            )
        return sink.getvalue()

    # -- writing ------------------------------------------------------------------------------

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """The digest a tag points at, or None if the tag does not exist (HEAD)."""
        response = self.request(
            "HEAD",
            f"/v2/{repository}/manifests/{reference}",
            scope=f"repository:{repository}:pull",
            headers={"Accept": media_types.MANIFEST_ACCEPT},
            ok=(200, 404),
            what=f"{repository}:{reference}",
        )
        if response.status_code == 404:
            return None
        digest = response.headers.get("Docker-Content-Digest")
        if digest:
            return digest
        # Some proxies drop the header: the manifest's own bytes say which digest the tag has.
        return self.get_manifest(repository, reference).digest

    def mount_blob(self, repository: str, digest: str, source_repository: str) -> bool:
        """Ask the registry to link a blob it has in another repository (no bytes move)."""
        response = self.request(
            "POST",
            f"/v2/{repository}/blobs/uploads/?mount={digest}&from={source_repository}",
            scope=f"repository:{repository}:pull,push repository:{source_repository}:pull",
            ok=(201, 202),
            what=f"mount of {digest}",
        )
        if response.status_code == 202:
            # Not mounted: the registry opened an upload session instead; cancel it.
            location = response.headers.get("Location", "")
            if location:
                self.request(
                    "DELETE",
                    self._absolute(location),
                    scope=f"repository:{repository}:pull,push",
                    ok=(200, 202, 204, 404),
                    what="cancel of an unused upload",
                )
            return False
        return True

    def _location(self, response: requests.Response, what: str) -> str:
        location = response.headers.get("Location")
        if not location:
            raise RemoteError(
                f"registry {self.registry}: upload of {what} got no Location to send to",
                hint="the registry or a proxy in front of it broke the upload protocol",
            )
        return location

    def _absolute(self, location: str) -> str:
        return location if location.startswith("http") else self.base_url + location

    def upload_blob(
        self,
        repository: str,
        digest: str,
        size: int,
        open_source: Callable[[], Any],
        *,
        what: str,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        """Upload a blob in one streaming PUT, hashing the bytes as they leave.

        The portable unit of resume is the blob (Distribution 2.8 drops an upload session after
        an interrupted PATCH): a failed attempt starts again from byte 0 with a fresh stream.
        A source whose bytes do not hash to ``digest`` is reported as an integrity error.
        """
        if self.chunk_size and size > self.chunk_size:
            self._upload_chunked(
                repository, digest, size, open_source, what=what, on_bytes=on_bytes
            )
            return
        scope = f"repository:{repository}:pull,push"

        def attempt() -> None:
            start = self.request(
                "POST", f"/v2/{repository}/blobs/uploads/", scope=scope, ok=(202,), what=what
            )
            location = self._absolute(self._location(start, what))
            separator = "&" if "?" in location else "?"
            with open_source() as source:
                body = HashingBody(source, size, on_bytes=on_bytes)
                try:
                    response = self._session.put(
                        f"{location}{separator}digest={digest}",
                        data=body,
                        headers={
                            **self._auth_header(scope),
                            "Content-Type": "application/octet-stream",
                        },
                        auth=self._basic_auth(),
                        verify=self._verify,
                        timeout=self._timeout,
                    )
                except _NETWORK_ERRORS as problem:
                    if on_bytes is not None and body.sent:
                        on_bytes(-body.sent)  # the retry sends these bytes again
                    raise Retryable(f"upload of {what} interrupted") from problem
                if body.sent == size and body.digest != digest:
                    raise IntegrityError(
                        f"{what}: bundle blob has digest {body.digest}, expected {digest}",
                        hint="the bundle is damaged; run bundle verify to find the part",
                    )
            if response.status_code in (200, 201, 204):
                return
            if on_bytes is not None and body.sent:
                on_bytes(-body.sent)
            if response.status_code == 401:
                # A bearer token expired during a long upload: a fresh one, a fresh attempt.
                self._forget_token(scope)
                raise Retryable("HTTP 401 (token expired)")
            if response.status_code in _TRANSIENT_STATUS:
                raise Retryable(f"HTTP {response.status_code}", after=_retry_after(response))
            if response.status_code == 400 and "DIGEST_INVALID" in response.text:
                raise IntegrityError(
                    f"{what}: the registry computed another digest than {digest}",
                    hint="the bundle is damaged; run bundle verify to find the part",
                )
            raise RemoteError(
                f"registry {self.registry}: upload of {what} failed with HTTP"
                f" {response.status_code}",
                hint="check the registry's logs and storage",
            )

        def note(attempt_number: int, problem: Retryable) -> None:
            self._tell(
                f"{self.registry}: upload of {what}: {problem.reason}, retry {attempt_number}"
            )

        try:
            self.retry.run(attempt, on_retry=note)
        except Retryable as problem:
            raise RemoteError(
                f"registry {self.registry}: upload of {what} still failing after"
                f" {self.retry.attempts} attempts ({problem.reason})",
                hint="the registry is overloaded or failing; re-run to resume",
            ) from problem

    def _upload_chunked(
        self,
        repository: str,
        digest: str,
        size: int,
        open_source: Callable[[], Any],
        *,
        what: str,
        on_bytes: Callable[[int], None] | None,
    ) -> None:
        """Upload in PATCH chunks; after a failed chunk, resume only where the registry proves it.

        After an interrupted PATCH the upload's status (GET on its URL) is asked for. A registry
        that reports exactly the bytes of the chunks it acknowledged keeps the session: the
        failed chunk is sent again from the source, with the hash state saved at that boundary.
        Anything else (Distribution 2.8 forgets the session) starts the blob again from byte 0.
        """
        scope = f"repository:{repository}:pull,push"
        restarts = 0
        while True:
            start = self.request(
                "POST", f"/v2/{repository}/blobs/uploads/", scope=scope, ok=(202,), what=what
            )
            location = self._absolute(self._location(start, what))
            offset = 0
            hasher = hashlib.sha256()
            failures = 0
            with open_source() as source:
                while offset < size:
                    count = min(self.chunk_size, size - offset)
                    checkpoint = hasher.copy()
                    source.seek(offset)
                    body = HashingBody(
                        _Limited(source, count), count, on_bytes=on_bytes, hasher=hasher
                    )
                    try:
                        response = self._session.patch(
                            location,
                            data=body,
                            headers={
                                **self._auth_header(scope),
                                "Content-Type": "application/octet-stream",
                                "Content-Range": f"{offset}-{offset + count - 1}",
                            },
                            auth=self._basic_auth(),
                            verify=self._verify,
                            timeout=self._timeout,
                        )
                        status = response.status_code
                    except _NETWORK_ERRORS:
                        status = 0
                    if status == 401:
                        self._forget_token(scope)  # expired: the status probe fetches a new one
                    if status == 202 and body.sent == count:
                        location = self._absolute(response.headers.get("Location", location))
                        offset += count
                        continue
                    if on_bytes is not None and body.sent:
                        on_bytes(-body.sent)
                    failures += 1
                    if failures >= self.retry.attempts:
                        raise RemoteError(
                            f"registry {self.registry}: chunked upload of {what} kept failing"
                            f" at byte {offset}",
                            hint="the registry is overloaded or failing; re-run to resume",
                        )
                    self._tell(f"{self.registry}: chunk at byte {offset} of {what} failed")
                    time.sleep(self.retry.delay(failures))
                    hasher = checkpoint  # forget the failed chunk's bytes
                    if self._upload_offset(location, scope) == offset:
                        continue  # the registry kept every acknowledged chunk
                    break  # the session is gone: start the blob again
                else:
                    if "sha256:" + hasher.hexdigest() != digest:
                        raise IntegrityError(
                            f"{what}: bundle blob has digest sha256:{hasher.hexdigest()},"
                            f" expected {digest}",
                            hint="the bundle is damaged; run bundle verify to find the part",
                        )
                    separator = "&" if "?" in location else "?"
                    self.request(
                        "PUT",
                        f"{location}{separator}digest={digest}",
                        scope=scope,
                        ok=(201, 204),
                        headers={"Content-Type": "application/octet-stream"},
                        data=b"",
                        what=what,
                    )
                    return
            restarts += 1
            if on_bytes is not None and offset:
                on_bytes(-offset)
            if restarts >= self.retry.attempts:
                raise RemoteError(
                    f"registry {self.registry}: chunked upload of {what} restarted"
                    f" {restarts} times",
                    hint="the registry keeps dropping upload sessions; re-run later",
                )

    def _upload_offset(self, location: str, scope: str) -> int | None:
        """Bytes an upload session holds, per the registry (``Range: 0-N``), or None."""
        try:
            response = self.request(
                "GET", location, scope=scope, ok=(204, 404, 400), what="upload status"
            )
        except RemoteError:
            return None
        value = response.headers.get("Range", "")
        if response.status_code != 204 or not value.startswith("0-") or not value[2:].isdigit():
            return None
        return int(value[2:]) + 1

    def put_manifest(
        self, repository: str, reference: str, content: bytes, media_type: str
    ) -> None:
        """Store a manifest under a digest or a tag."""
        self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            scope=f"repository:{repository}:pull,push",
            headers={"Content-Type": media_type},
            data=content,
            ok=(201, 200),
            what=f"manifest {repository}:{reference}",
        )


class _ResumingBlobReader(io.RawIOBase):
    """Reads one blob; on a network fault it re-opens at the current offset with Range."""

    def __init__(self, client: RegistryClient, repository: str, digest: str, size: int) -> None:
        super().__init__()
        self._client = client
        self._repository = repository
        self._digest = digest
        self._size = size
        self._position = 0
        self._response: requests.Response | None = None
        self._failures = 0

    def readable(self) -> bool:
        return True

    def start_at(self, offset: int) -> None:
        """Begin at ``offset`` (a resumed download); call before the first read."""
        self._position = offset

    def _open(self) -> None:
        headers = {"Range": f"bytes={self._position}-"} if self._position else {}
        response = self._client.request(
            "GET",
            f"/v2/{self._repository}/blobs/{self._digest}",
            scope=f"repository:{self._repository}:pull",
            ok=(200, 206, 404),
            headers=headers,
            stream=True,
            what=f"blob {self._digest}",
        )
        if response.status_code == 404:
            response.close()
            raise InputError(
                f"registry {self._client.registry}: blob {self._digest} of {self._repository}"
                " is missing",
                hint="the image in the registry is incomplete; push it again",
            )
        if self._position and response.status_code == 200:
            # No Range support: skip what the caller already has.
            skip = self._position
            while skip:
                data = response.raw.read(min(skip, 1 << 20))
                if not data:
                    break
                skip -= len(data)
        self._response = response

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        if self._position >= self._size:
            return 0
        while True:
            try:
                if self._response is None:
                    self._open()
                assert self._response is not None
                count = self._response.raw.readinto(buffer)
                if count == 0:
                    raise urllib3.exceptions.ProtocolError("connection closed before the end")
                self._position += count
                return count
            except _NETWORK_ERRORS as problem:
                if self._response is not None:
                    self._response.close()
                    self._response = None
                self._failures += 1
                if self._failures >= self._client.retry.attempts:
                    raise RemoteError(
                        f"registry {self._client.registry}: download of {self._digest} kept"
                        f" failing at byte {self._position} ({type(problem).__name__})",
                        hint="check the network to the registry and try again",
                    ) from problem
                time.sleep(self._client.retry.delay(self._failures))

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None
        super().close()
