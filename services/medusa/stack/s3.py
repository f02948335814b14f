"""A local S3-compatible object store for checkpoints on ``s3a://``: s3proxy with its
``filesystem`` backend, which keeps each bucket as a folder and each object as a file
under ``<home>/data``.

This module is the server side (the properties file, the command line, a readiness
check, the bucket); ``medusa.object_store`` is the client side (Spark's S3A settings).
Installed by ``infra/install_s3.sh`` into ``<cache>/s3proxy/<version>/libs``, with
Spark's S3A client in ``<cache>/s3a-jars/<hadoop version>``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from medusa.settings import REPO_ROOT
from medusa.stack.pins import pinned

if TYPE_CHECKING:
    from medusa.stack.components import Component

S3PROXY_POM = REPO_ROOT / "infra" / "maven" / "s3proxy" / "pom.xml"
S3A_POM = REPO_ROOT / "infra" / "maven" / "s3a" / "pom.xml"
S3PROXY_MAIN = "org.gaul.s3proxy.Main"

# s3proxy logs through logback; without a configuration logback prints DEBUG lines of
# every request (Jetty's included).
_LOGBACK = """\
<configuration>
  <appender name="console" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>[%d{ISO8601}] %level %msg \\(%logger{0}\\)%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.s3proxy" level="INFO"/>
  <root level="WARN"><appender-ref ref="console"/></root>
</configuration>
"""


def s3proxy_version() -> str:
    return pinned(S3PROXY_POM, "s3proxy.version")


def s3a_jars_folder(cache_dir: Path) -> Path:
    """Where ``infra/install_s3.sh`` puts Spark's S3A client (hadoop-aws and the SDK)."""
    return cache_dir / "s3a-jars" / pinned(S3A_POM, "hadoop.version")


def s3proxy_libs(cache_dir: Path) -> Path:
    """The installed server's jars; raises when ``infra/install_s3.sh`` has not run."""
    version = s3proxy_version()
    libs = cache_dir / "s3proxy" / version / "libs"
    if not (libs.parent / ".installed").is_file():
        from medusa.stack.components import ComponentMissingError

        raise ComponentMissingError(f"s3proxy {version} is not installed in {libs}; "
                                    "run infra/install_s3.sh")
    return libs


class LocalS3:
    """An s3proxy whose files all live under ``home`` (s3proxy.properties, logback.xml,
    data/<bucket>/...), serving the S3 API on 127.0.0.1:``port`` to one identity."""

    def __init__(self, home: Path, port: int, java: str, libs: Path, access_key: str,
                 secret_key: str, buckets: Iterable[str] = ("medusa",),
                 heap: str = "-Xmx256m") -> None:
        self.home = home
        self.port = port
        self.java = java
        self.libs = libs
        self.access_key = access_key
        self._secret_key = secret_key
        self.buckets = tuple(buckets)
        self.heap = heap

    def __repr__(self) -> str:
        return f"LocalS3({self.endpoint}, {self.home})"

    @property
    def secret_key(self) -> str:
        return self._secret_key

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def properties_file(self) -> Path:
        return self.home / "s3proxy.properties"

    def properties(self) -> dict[str, str]:
        return {
            "s3proxy.endpoint": self.endpoint,
            # Requests signed with AWS Signature v2 or v4 (the SDK Spark uses signs v4).
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self._secret_key,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.data_dir),
            # The backend's own identity; the local file system checks none.
            "jclouds.identity": self.access_key,
            "jclouds.credential": self._secret_key,
        }

    def bucket_dir(self, bucket: str) -> Path:
        """Where the backend keeps a bucket's objects (an object is a file)."""
        return self.data_dir / bucket

    def configure(self) -> None:
        """Write the properties (readable by the owner only: they hold the secret key) and
        logback.xml; safe to repeat."""
        from medusa.credentials import write_private

        self.home.mkdir(parents=True, exist_ok=True)
        write_private(self.properties_file,
                      "".join(f"{key}={value}\n" for key, value in self.properties().items()))
        (self.home / "logback.xml").write_text(_LOGBACK)
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [self.java, self.heap, f"-Dlogback.configurationFile={self.home / 'logback.xml'}",
                "-cp", f"{self.libs}/*", S3PROXY_MAIN, "--properties", str(self.properties_file)]

    def ready(self, timeout_s: float = 2.0) -> bool:
        """The S3 API answers, and the buckets exist (created at the first answer)."""
        if not s3_api_answers(self.endpoint, timeout_s):
            return False
        for bucket in self.buckets:
            if not self.bucket_dir(bucket).is_dir():
                create_bucket(self.endpoint, self.access_key, self._secret_key, bucket,
                              timeout_s=timeout_s)
        return True


def signed_headers(method: str, url: str, access_key: str, secret_key: str,
                   region: str = "us-east-1", now: datetime | None = None) -> dict[str, str]:
    """The headers of an S3 request with no body, signed with AWS Signature Version 4."""
    parsed = httpx.URL(url)
    host = parsed.host if parsed.port is None else f"{parsed.host}:{parsed.port}"
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    empty = hashlib.sha256(b"").hexdigest()
    headers = {"host": host, "x-amz-content-sha256": empty, "x-amz-date": stamp}
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, parsed.path or "/", parsed.query.decode(),
                           *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names, empty])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret_key}".encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={names}, Signature={signature}")
    return headers


def create_bucket(endpoint: str, access_key: str, secret_key: str, bucket: str,
                  region: str = "us-east-1", timeout_s: float = 5.0) -> None:
    """PUT /<bucket>; a bucket that exists already is fine."""
    url = f"{endpoint.rstrip('/')}/{bucket}"
    response = httpx.put(url, headers=signed_headers("PUT", url, access_key, secret_key, region),
                         timeout=timeout_s)
    if response.status_code not in (200, 409):
        raise RuntimeError(f"creating the bucket {bucket} at {endpoint} failed: "
                           f"{response.status_code} {response.text[:300]}")


def s3_api_answers(endpoint: str, timeout_s: float = 2.0) -> bool:
    """The S3 API answers: an unsigned request gets S3's XML refusal (403)."""
    try:
        response = httpx.get(f"{endpoint}/", timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return response.status_code in (200, 403) and response.text.lstrip().startswith("<")


def s3_component(store: LocalS3) -> Component:
    """``s3`` for the launcher: configured (with its buckets) before each start."""
    from medusa.stack.components import Component

    return Component(name="s3", command=store.command(), env={}, endpoint=store.endpoint,
                     ready=store.ready, prepare=store.configure)
