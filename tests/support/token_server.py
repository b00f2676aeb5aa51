"""A bearer-token service and a real Distribution registry that trusts it (``auth: token:``).

This is the auth flow of Docker Hub, Harbor, GitLab, Quay and most private registries: the
registry answers 401 with ``WWW-Authenticate: Bearer realm=...,service=...,scope=...``, the
client fetches a JWT from the realm with its credentials, and sends it as ``Bearer``.

:class:`TokenServer` is a small threaded ``http.server`` on 127.0.0.1 that checks HTTP basic
credentials (GET, as docker and skopeo ask) or an OAuth2 form (POST ``grant_type=password`` or
``grant_type=refresh_token``, as docker asks with an identity token) and issues the JWT format
Distribution 2.8 verifies: ES256 signed, header ``kid`` = the libtrust key id of the signing key,
whose self-signed certificate is the registry's ``rootcertbundle``. Every request is recorded so
tests can assert that tokens, and which scopes, were asked for.

:class:`TokenRegistryServer` is a :class:`RegistryServer` whose config carries the token section.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from support.registry_server import LOOPBACK, RegistryServer

SERVICE = "sealift-test-registry"
ISSUER = "sealift-test-token-issuer"
TOKEN_TTL_S = 300


def b64url(data: bytes) -> str:
    """Base64url without padding, as JOSE wants."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_key_id(public_key: ec.EllipticCurvePublicKey) -> str:
    """The docker/libtrust key id: base32 of the first 240 bits of sha256(DER SPKI), 12x4."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    encoded = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(encoded[i : i + 4] for i in range(0, len(encoded), 4))


def parse_scopes(values: list[str]) -> list[tuple[str, str, list[str]]]:
    """``type:name:action,action`` scopes, repeated or space-separated, as (type, name, actions).

    Distribution puts several scopes in one challenge parameter separated by spaces; docker
    repeats the ``scope`` query parameter. Both forms land here.
    """
    scopes = []
    for value in values:
        for item in value.split():
            kind, _, rest = item.partition(":")
            name, _, actions = rest.rpartition(":")
            if kind and name:
                scopes.append((kind, name, [a for a in actions.split(",") if a]))
    return scopes


@dataclass(frozen=True)
class TokenRequest:
    """One request the token service answered."""

    method: str
    grant: str  # "basic", "password", "refresh_token" or "anonymous"
    user: str
    scopes: tuple[str, ...]  # as sent, split on spaces
    service: str
    granted: bool


class TokenServer:
    """A threaded token service on 127.0.0.1; ``realm`` is its token URL.

    ``users`` maps user names to passwords; ``refresh_tokens`` maps identity tokens (docker's
    ``identitytoken``) to the user they stand for. Anything else gets 401.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        users: dict[str, str],
        refresh_tokens: dict[str, str] | None = None,
        service: str = SERVICE,
        issuer: str = ISSUER,
        token_ttl_s: int = TOKEN_TTL_S,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.users = dict(users)
        self.refresh_tokens = dict(refresh_tokens or {})
        self.service = service
        self.issuer = issuer
        # Distribution 2.8 accepts a token until exp + 60 s (its leeway): a TTL of -58 makes
        # tokens that expire two seconds after they are issued.
        self.token_ttl_s = token_ttl_s
        self.requests: list[TokenRequest] = []
        self._lock = threading.Lock()
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.key_id = libtrust_key_id(self._key.public_key())
        self.cert_path = self.work_dir / "token-signer.crt"
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- what tests look at -------------------------------------------------------------------

    @property
    def realm(self) -> str:
        if self._httpd is None:
            raise RuntimeError("token server not started")
        return f"http://{LOOPBACK}:{self._httpd.server_address[1]}/token"

    def scopes_granted(self) -> list[str]:
        """Every scope in every granted request, in order."""
        with self._lock:
            return [s for r in self.requests if r.granted for s in r.scopes]

    def refused(self) -> list[TokenRequest]:
        with self._lock:
            return [r for r in self.requests if not r.granted]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- tokens -------------------------------------------------------------------------------

    def _write_signer_cert(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sealift test token signer")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .sign(self._key, hashes.SHA256())
        )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, subject: str, scopes: list[tuple[str, str, list[str]]], service: str) -> str:
        """A compact JWS (ES256) granting ``scopes`` to ``subject``."""
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "kid": self.key_id}
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": service,
            "exp": now + self.token_ttl_s,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(16),
            "access": [{"type": t, "name": n, "actions": a} for t, n, a in scopes],
        }
        signing_input = (
            b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        der = self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def _answer(
        self, method: str, grant: str, user: str, ok: bool, params: dict[str, list[str]]
    ) -> tuple[int, dict[str, object]]:
        raw_scopes = params.get("scope", [])
        service = (params.get("service") or [""])[0]
        record = TokenRequest(
            method=method,
            grant=grant,
            user=user,
            scopes=tuple(s for v in raw_scopes for s in v.split()),
            service=service,
            granted=ok and service == self.service,
        )
        with self._lock:
            self.requests.append(record)
        if not record.granted:
            return 401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]}
        token = self.issue(user, parse_scopes(raw_scopes), service)
        issued = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: dict[str, object] = {
            "token": token,
            "access_token": token,
            "expires_in": max(self.token_ttl_s + 60, 1),
            "issued_at": issued,
        }
        if grant in ("password", "refresh_token"):
            body["refresh_token"] = params.get("refresh_token", [""])[0]
        return 200, body

    def _check_basic(self, header: str) -> tuple[str, str, bool]:
        if not header.lower().startswith("basic "):
            return "anonymous", "", False
        try:
            user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except ValueError:
            return "basic", "", False
        return "basic", user, self.users.get(user) == password and bool(password)

    def handle(
        self, method: str, auth_header: str, query: str, form: str
    ) -> tuple[int, dict[str, object]]:
        if method == "GET":
            params = parse_qs(query, keep_blank_values=True)
            grant, user, ok = self._check_basic(auth_header)
            return self._answer(method, grant, user, ok, params)
        params = parse_qs(form, keep_blank_values=True)
        grant = (params.get("grant_type") or [""])[0]
        if grant == "password":
            user = (params.get("username") or [""])[0]
            password = (params.get("password") or [""])[0]
            ok = bool(password) and self.users.get(user) == password
        elif grant == "refresh_token":
            refresh = (params.get("refresh_token") or [""])[0]
            user = self.refresh_tokens.get(refresh, "")
            ok = bool(user)
        else:
            user, ok = "", False
        return self._answer(method, grant or "none", user, ok, params)

    # -- serving ------------------------------------------------------------------------------

    def start(self) -> TokenServer:
        self._write_signer_cert()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, status: int, body: dict[str, object]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="sealift-test-token"')
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method: str) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                form = self.rfile.read(length).decode() if length else ""
                if url.path != "/token":
                    self._reply(404, {"errors": [{"code": "NOT_FOUND"}]})
                    return
                status, body = server.handle(
                    method, self.headers.get("Authorization", ""), url.query, form
                )
                self._reply(status, body)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: object) -> None:
                del format, args  # quiet: pytest output stays readable

        self._httpd = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class TokenRegistryServer(RegistryServer):
    """A plain-http Distribution registry with ``auth: token:`` and its own :class:`TokenServer`.

    ``auth`` is the (user, password) the token service accepts, so code written for
    ``RegistryServer.auth`` (skopeo pushes, auth files) works unchanged.
    """

    def __init__(
        self,
        *,
        auth: tuple[str, str],
        refresh_tokens: dict[str, str] | None = None,
        work_dir: Path | None = None,
    ) -> None:
        owns = work_dir is None
        work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="token-registry-"))
        super().__init__(work_dir=work_dir)
        self._owns_work_dir = owns
        self.auth = auth  # Set after __init__ so the parent never writes an htpasswd section.
        self.token_server = TokenServer(
            work_dir / "token", users={auth[0]: auth[1]}, refresh_tokens=refresh_tokens
        )

    def _write_config(self, port: int) -> Path:
        saved, self.auth = self.auth, None
        try:
            config_path = super()._write_config(port)
        finally:
            self.auth = saved
        config = yaml.safe_load(config_path.read_text())
        config["auth"] = {
            "token": {
                "realm": self.token_server.realm,
                "service": self.token_server.service,
                "issuer": self.token_server.issuer,
                "rootcertbundle": str(self.token_server.cert_path),
            }
        }
        config_path.write_text(yaml.safe_dump(config, sort_keys=True))
        return config_path

    def start(self) -> TokenRegistryServer:
        self.token_server.start()
        try:
            super().start()
        except BaseException:
            self.token_server.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.token_server.stop()
            if self._owns_work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> TokenRegistryServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
