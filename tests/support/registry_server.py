"""Run a real CNCF Distribution registry (Debian's ``docker-registry``) on loopback for tests.

The registry is the same server software most private mirrors run, so pushing to it exercises
the real wire protocol (chunked uploads, cross-repo mounts, manifest content negotiation, auth
challenges) instead of a mock's idea of it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REGISTRY_BINARY = "/usr/bin/docker-registry"
HTPASSWD_BINARY = "htpasswd"
LOOPBACK = "127.0.0.1"

# Bounded so a broken registry fails the test run quickly instead of hanging CI.
DEFAULT_START_TIMEOUT_S = 15.0
_STDERR_TAIL_CHARS = 4000


class RegistryStartError(RuntimeError):
    """The registry process did not come up; the message carries its stderr tail."""


def registry_available() -> bool:
    """Return True when the ``docker-registry`` binary is installed and executable."""
    return os.access(REGISTRY_BINARY, os.X_OK)


def htpasswd_available() -> bool:
    """Return True when bcrypt htpasswd entries can be generated (apache2-utils or bcrypt)."""
    if shutil.which(HTPASSWD_BINARY):
        return True
    try:
        import bcrypt  # noqa: F401
    except ImportError:
        return False
    return True


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    The port is released before returning, so another process can grab it; callers that
    start a server on it should retry on "address already in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def loopback_session() -> requests.Session:
    """Return a requests session that ignores proxy and CA environment variables.

    Proxies must never see loopback test traffic, and REQUESTS_CA_BUNDLE would silently
    override Session.verify, so callers must still pass ``verify=`` on every request.
    """
    session = requests.Session()
    session.trust_env = False
    return session


def htpasswd_line(user: str, password: str) -> str:
    """Return one ``user:$2y$...`` htpasswd line with a bcrypt hash.

    Distribution only accepts bcrypt entries. The password goes to ``htpasswd`` on stdin
    (``-i``) so it never appears in a process listing.
    """
    exe = shutil.which(HTPASSWD_BINARY)
    if exe:
        result = subprocess.run(
            [exe, "-niB", user],
            input=password,
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout.strip()
    try:
        import bcrypt
    except ImportError as exc:
        raise RuntimeError(
            "htpasswd auth needs `htpasswd` (apt-get install apache2-utils) or the bcrypt package"
        ) from exc
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()
    return f"{user}:{hashed}"


def make_test_pki(out_dir: Path, hosts: tuple[str, ...] = (LOOPBACK, "localhost")) -> Path:
    """Write a throwaway CA and a server certificate for ``hosts`` into ``out_dir``.

    Files: ``ca.crt`` (the trust anchor; also makes ``out_dir`` usable as a containers
    ``--cert-dir``), ``server.pem`` and ``server-key.pem``. Returns the CA path.
    EC P-256 keys keep generation to milliseconds.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    # Backdated so small clock differences between processes never make the cert "not yet valid".
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=2)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sealift test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    ca_path = out_dir / "ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (out_dir / "server.pem").write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_path = out_dir / "server-key.pem"
    key_path.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return ca_path


class RegistryServer:
    """A ``docker-registry serve`` process on 127.0.0.1 with a free port and tmp storage.

    Use as a context manager, or call :meth:`start` and :meth:`stop` yourself.
    """

    def __init__(
        self,
        *,
        auth: tuple[str, str] | None = None,
        tls: bool = False,
        work_dir: Path | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        """Configure (but do not start) a registry.

        ``auth`` enables htpasswd basic auth for that (user, password); ``tls`` serves HTTPS
        with a fresh test CA (see :attr:`ca_path`); ``work_dir`` holds config, storage and
        logs (a temporary directory, removed on stop, when omitted).
        """
        self.auth = auth
        self.tls = tls
        self.start_timeout_s = start_timeout_s
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="registry-"))
        self.port: int | None = None
        self.ca_path: Path | None = None
        self.cert_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_path = self.work_dir / "registry.log"

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, the form image references and skopeo expect."""
        if self.port is None:
            raise RuntimeError("registry not started")
        return f"{LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        """Base URL, ``http(s)://127.0.0.1:PORT``."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}"

    @property
    def verify(self) -> str | bool:
        """Value for requests' ``verify=``: the test CA under TLS, else False (plain http)."""
        return str(self.ca_path) if self.ca_path else False

    @property
    def storage_dir(self) -> Path:
        """Filesystem root the registry stores blobs and manifests under."""
        return self.work_dir / "storage"

    def _write_config(self, port: int) -> Path:
        http: dict[str, object] = {
            "addr": f"{LOOPBACK}:{port}",
            # A fixed secret silences the per-start warning and keeps upload state valid.
            "secret": "sealift-test-secret",
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        }
        if self.tls:
            assert self.cert_dir is not None
            http["tls"] = {
                "certificate": str(self.cert_dir / "server.pem"),
                "key": str(self.cert_dir / "server-key.pem"),
            }
        config: dict[str, object] = {
            "version": 0.1,
            "log": {"level": "info", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.storage_dir)},
                "delete": {"enabled": True},
                "cache": {"blobdescriptor": "inmemory"},
            },
            "http": http,
            # The periodic storage health check only adds log noise in tests.
            "health": {"storagedriver": {"enabled": False}},
        }
        if self.auth:
            htpasswd_path = self.work_dir / "htpasswd"
            htpasswd_path.write_text(htpasswd_line(*self.auth) + "\n")
            config["auth"] = {"htpasswd": {"realm": "sealift-test", "path": str(htpasswd_path)}}
        config_path = self.work_dir / "config.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=True))
        return config_path

    def stderr_tail(self) -> str:
        """Return the last few KB of the registry's log output."""
        try:
            text = self._stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-_STDERR_TAIL_CHARS:]

    def start(self) -> RegistryServer:
        """Start the registry and block until ``/v2/`` answers; return self.

        Retries with a new port when another process grabbed the chosen one in between.
        """
        if not registry_available():
            raise RegistryStartError(
                f"{REGISTRY_BINARY} not installed (apt-get install docker-registry)"
            )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.storage_dir.mkdir(exist_ok=True)
        if self.tls and self.ca_path is None:
            self.cert_dir = self.work_dir / "certs"
            self.ca_path = make_test_pki(self.cert_dir)
        last_error: RegistryStartError | None = None
        for _attempt in range(3):
            port = free_port()
            config_path = self._write_config(port)
            try:
                self._launch(config_path, port)
                return self
            except RegistryStartError as exc:
                last_error = exc
                if "address already in use" not in str(exc):
                    break
        assert last_error is not None
        raise last_error

    def _launch(self, config_path: Path, port: int) -> None:
        with open(self._stderr_path, "wb") as log:
            # Logs go to a file, not a pipe: nobody drains a pipe, and a full one would stall
            # the registry mid-test.
            self._proc = subprocess.Popen(
                [REGISTRY_BINARY, "serve", str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
            )
        self.port = port
        deadline = time.monotonic() + self.start_timeout_s
        session = loopback_session()
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise RegistryStartError(
                        f"docker-registry exited with {self._proc.returncode}:\n"
                        + self.stderr_tail()
                    )
                try:
                    resp = session.get(f"{self.url}/v2/", timeout=1, verify=self.verify)
                except requests.RequestException:
                    time.sleep(0.05)
                    continue
                # 401 means the auth layer is up, which is as ready as an auth registry gets.
                if resp.status_code in (200, 401):
                    return
                time.sleep(0.05)
        finally:
            session.close()
        self._kill()
        raise RegistryStartError(
            f"docker-registry did not answer /v2/ within {self.start_timeout_s}s:\n"
            + self.stderr_tail()
        )

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def stop(self) -> None:
        """Stop the process and remove the work dir if this object created it."""
        self._kill()
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> RegistryServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
