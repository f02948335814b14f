"""Checkpoints on an S3-compatible store, without a store: which endpoint and key a node
uses (``medusa.object_store``), the S3A settings Spark gets, and how the stack lays out
and starts its local store (``medusa.stack.s3``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from medusa import credentials
from medusa.object_store import (
    ObjectStoreSettingsError,
    S3Access,
    s3_access,
    s3a_conf,
    uses_object_store,
)
from medusa.settings import StackSettings
from medusa.stack.components import health_checks, storage_components
from medusa.stack.layout import StackLayout
from medusa.stack.s3 import LocalS3, s3a_jars_folder, signed_headers

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _no_stack_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials file unless a test writes one; no store named by the environment."""
    monkeypatch.setenv(credentials.FILE_VARIABLE, str(tmp_path / "credentials.json"))
    for name in ("ENDPOINT", "PORT", "REGION", "ACCESS_KEY", "SECRET_KEY", "BUCKET"):
        monkeypatch.delenv(f"MEDUSA_S3_{name}", raising=False)
    monkeypatch.delenv("MEDUSA_STACK_S3", raising=False)


def test_only_s3a_locations_are_on_the_object_store() -> None:
    assert uses_object_store("s3a://medusa/checkpoints/alpha/node-1")
    assert not uses_object_store("hdfs://127.0.0.1:18760/medusa/checkpoints")
    assert not uses_object_store("/tmp/checkpoints")
    assert not uses_object_store("file:///tmp/checkpoints")


def test_the_settings_name_the_store_and_its_key() -> None:
    access = s3_access(StackSettings(s3_endpoint="https://s3.example.org/",
                                     s3_region="eu-west-1", s3_access_key="key-id",
                                     s3_secret_key=SecretStr("s3cr3t")))
    assert access == S3Access("https://s3.example.org", "eu-west-1", "key-id", "s3cr3t")
    assert "s3cr3t" not in repr(access) and "s3cr3t" not in str(access)


def test_by_default_the_local_store_with_the_stack_s_key(tmp_path: Path) -> None:
    stack = credentials.ensure(tmp_path / "credentials.json", ["alpha"])
    access = s3_access(StackSettings(s3_port=18999))
    assert access.endpoint == "http://127.0.0.1:18999"
    assert (access.access_key, access.secret_key) == ("medusa",
                                                      stack.secret(credentials.ADMIN).token)


def test_no_key_anywhere_is_refused() -> None:
    with pytest.raises(ObjectStoreSettingsError, match="MEDUSA_S3_SECRET_KEY"):
        s3_access(StackSettings())


def test_s3a_settings_for_a_local_store() -> None:
    conf = s3a_conf(S3Access("http://127.0.0.1:18750", "us-east-1", "medusa", "s3cr3t"))
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:18750"
    assert conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.connection.ssl.enabled"] == "false"
    assert (conf["fs.s3a.access.key"], conf["fs.s3a.secret.key"]) == ("medusa", "s3cr3t")
    assert conf["fs.s3a.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")
    assert conf["fs.s3a.change.detection.version.required"] == "false"
    https = s3a_conf(S3Access("https://s3.example.org", "eu-west-1", "k", "s"))
    assert https["fs.s3a.connection.ssl.enabled"] == "true"


def test_the_s3a_jars_match_the_hadoop_pyspark_ships(tmp_path: Path) -> None:
    import pyspark

    shipped = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert shipped, "pyspark ships no hadoop-client-api"
    version = shipped[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    assert s3a_jars_folder(tmp_path) == tmp_path / "s3a-jars" / version


def test_the_local_store_s_files_and_command(tmp_path: Path) -> None:
    store = LocalS3(tmp_path / "s3", 18750, "java", tmp_path / "libs", "medusa", "s3cr3t",
                    buckets=["medusa", "other"])
    store.configure()
    properties = store.properties_file.read_text()
    assert "s3proxy.endpoint=http://127.0.0.1:18750\n" in properties
    assert "s3proxy.credential=s3cr3t\n" in properties
    assert "jclouds.provider=filesystem\n" in properties
    assert f"jclouds.filesystem.basedir={tmp_path / 's3' / 'data'}\n" in properties
    assert store.properties_file.stat().st_mode & 0o077 == 0  # it holds the secret key
    assert store.data_dir.is_dir()
    command = store.command()
    assert command[0] == "java" and "org.gaul.s3proxy.Main" in command
    assert command[-2:] == ["--properties", str(store.properties_file)]
    assert "s3cr3t" not in " ".join(command) and "s3cr3t" not in repr(store)
    store.configure()  # again: nothing breaks


def test_the_stack_runs_a_store_only_when_asked(tmp_path: Path) -> None:
    without = StackLayout.from_settings(StackSettings(run_dir=tmp_path))
    assert without.s3_endpoint is None and "s3" not in health_checks(without)
    assert 18750 not in without.all_ports()
    layout = StackLayout.from_settings(StackSettings(run_dir=tmp_path, stack_s3=True,
                                                     s3_port=18751))
    assert layout.s3_endpoint == "http://127.0.0.1:18751"
    assert layout.all_ports()[18751] == "local S3 object store"
    assert health_checks(layout)["s3"][0] == "http://127.0.0.1:18751"


def test_the_stack_s_store_uses_the_stack_s_key(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    from medusa.stack.s3 import s3proxy_version

    installed = cache / "s3proxy" / s3proxy_version()
    (installed / "libs").mkdir(parents=True)
    (installed / ".installed").write_text("x")
    layout = StackLayout.from_settings(StackSettings(run_dir=tmp_path / "run", cache_dir=cache,
                                                     stack_s3=True, s3_bucket="ck"))
    [component] = storage_components(layout)
    assert component.name == "s3" and component.endpoint == layout.s3_endpoint
    assert component.prepare is not None
    component.prepare()
    stack = credentials.load(layout.credentials_file)
    assert stack is not None
    properties = (tmp_path / "run" / "s3" / "s3proxy.properties").read_text()
    assert f"s3proxy.credential={stack.secret(credentials.ADMIN).token}\n" in properties


def test_requests_are_signed_with_signature_version_4() -> None:
    """AWS's published example of a signed GET (the S3 API reference, "Signature
    Calculations for the Authorization Header", GET Object): the same signature."""
    headers = signed_headers(
        "GET", "http://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
        "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        now=datetime(2013, 5, 24, tzinfo=UTC))
    assert headers["x-amz-date"] == "20130524T000000Z"
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
