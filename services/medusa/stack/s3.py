"""A local S3-compatible object store for checkpoints on ``s3a://``: s3proxy with its
``filesystem`` backend, which keeps each bucket as a folder and each object as a file
under ``<home>/data``.

This module is the server side (the properties file, the command line, a readiness
check, the bucket); ``medusa.object_store`` is the client side (Spark's S3A settings).
Installed by ``infra/install_s3.sh`` into ``<cache>/s3proxy/<version>/libs``, with
Spark's S3A client in ``<cache>/s3a-jars/<hadoop version>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from medusa.settings import REPO_ROOT

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


def _pinned(pom: Path, property_name: str) -> str:
    match = re.search(rf"<{re.escape(property_name)}>([^<]+)</{re.escape(property_name)}>",
                      pom.read_text())
    if not match:
        raise RuntimeError(f"{pom} does not pin {property_name}")
    return match.group(1).strip()


def s3proxy_version() -> str:
    return _pinned(S3PROXY_POM, "s3proxy.version")


def s3a_jars_folder(cache_dir: Path) -> Path:
    """Where ``infra/install_s3.sh`` puts Spark's S3A client (hadoop-aws and the SDK)."""
    return cache_dir / "s3a-jars" / _pinned(S3A_POM, "hadoop.version")


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
        logback.xml, and create the buckets; safe to repeat."""
        from medusa.credentials import write_private

        self.home.mkdir(parents=True, exist_ok=True)
        write_private(self.properties_file,
                      "".join(f"{key}={value}\n" for key, value in self.properties().items()))
        (self.home / "logback.xml").write_text(_LOGBACK)
        for bucket in self.buckets:  # the backend lists a bucket for each folder
            self.bucket_dir(bucket).mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [self.java, self.heap, f"-Dlogback.configurationFile={self.home / 'logback.xml'}",
                "-cp", f"{self.libs}/*", S3PROXY_MAIN, "--properties", str(self.properties_file)]

    def ready(self, timeout_s: float = 2.0) -> bool:
        return s3_api_answers(self.endpoint, timeout_s)


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
