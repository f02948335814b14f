"""Checkpoints on an S3-compatible object store: which store, with which key, and the
Hadoop S3A configuration through which a node's Spark (and Medusa's own bookkeeping
beside Spark's files, ``medusa_spark.checkpoint_store``) reads and writes ``s3a://``.

The store is the local one ``medusa up --s3`` starts (s3proxy, ``medusa.stack.s3``)
unless ``MEDUSA_S3_ENDPOINT`` names another; the key is ``MEDUSA_S3_ACCESS_KEY`` /
``MEDUSA_S3_SECRET_KEY``, or else the stack's own (see ``StackSettings.s3_secret_key``).
"""

from __future__ import annotations

from dataclasses import dataclass

from medusa.errors import MedusaError
from medusa.settings import StackSettings

SCHEME = "s3a"


class ObjectStoreSettingsError(MedusaError, ValueError):
    """No secret key for the object store: neither a setting nor the stack's credentials."""


@dataclass(frozen=True)
class S3Access:
    """An S3 endpoint and the key that signs requests to it; its repr hides the secret."""

    endpoint: str
    region: str
    access_key: str
    secret_key: str

    def __repr__(self) -> str:
        return (f"S3Access(endpoint={self.endpoint!r}, region={self.region!r}, "
                f"access_key={self.access_key!r}, secret_key='**********')")

    __str__ = __repr__


def uses_object_store(location: str) -> bool:
    """Whether a checkpoint location (or root) is on an S3 store."""
    return location.startswith(f"{SCHEME}://")


def local_endpoint(settings: StackSettings) -> str:
    return f"http://127.0.0.1:{settings.s3_port}"


def stack_secret_key() -> str | None:
    """The secret key of the stack's store: the ``admin`` principal's token; None for a
    stack that made no credentials."""
    from medusa import credentials

    stack = credentials.process_credentials()
    return None if stack is None else stack.secret(credentials.ADMIN).token


def s3_access(settings: StackSettings | None = None) -> S3Access:
    """The store this process's ``s3a://`` locations are on, from the settings."""
    settings = settings or StackSettings()
    if settings.s3_secret_key is not None:
        secret = settings.s3_secret_key.get_secret_value()
    else:
        found = stack_secret_key()
        if found is None:
            raise ObjectStoreSettingsError(
                "s3a:// checkpoints need the object store's secret key: set "
                "MEDUSA_S3_SECRET_KEY, or run a stack with credentials (`medusa up --s3`)")
        secret = found
    return S3Access(endpoint=(settings.s3_endpoint or local_endpoint(settings)).rstrip("/"),
                    region=settings.s3_region, access_key=settings.s3_access_key,
                    secret_key=secret)


def s3a_conf(access: S3Access) -> dict[str, str]:
    """Hadoop's ``fs.s3a.*`` properties for the store (Spark takes each as
    ``spark.hadoop.<key>``; Spark's UI redacts the secret key)."""
    return {
        "fs.s3a.endpoint": access.endpoint,
        "fs.s3a.endpoint.region": access.region,
        # Buckets in the path (http://host:port/bucket/key), not in a host name.
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": str(access.endpoint.startswith("https:")).lower(),
        "fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": access.access_key,
        "fs.s3a.secret.key": access.secret_key,
        # Changes are detected by ETag; a store that keeps no object versions (s3proxy's
        # file system backend) has no version ids to require.
        "fs.s3a.change.detection.mode": "server",
        "fs.s3a.change.detection.source": "etag",
        "fs.s3a.change.detection.version.required": "false",
        # A store on this machine that does not answer is down, not slow: fail in seconds
        # rather than retry for minutes (the node's fragment then fails and is retried).
        "fs.s3a.connection.establish.timeout": "5s",
        "fs.s3a.attempts.maximum": "3",
        "fs.s3a.retry.limit": "3",
        "fs.s3a.retry.interval": "250ms",
    }
