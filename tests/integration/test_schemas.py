import json
import subprocess
import sys

import pytest

from medusa import credentials
from medusa.registry import SchemaRefusedError, register
from medusa.schemas import DEFAULT_TOPICS, all_schemas, schema_for_topic, subject_for

pytestmark = pytest.mark.integration


def test_every_schema_registers_with_backward_compatibility(registry, topic) -> None:
    assert set(DEFAULT_TOPICS.values()) <= {schema.name for schema in all_schemas()}
    for schema in all_schemas():  # the services' own too: node load reports, heartbeats
        name = schema.name
        registration = register(registry, f"{topic}.{name}", schema)
        assert registration.subject == f"{topic}.{name}-value"
        assert registration.schema_id > 0
        assert registry.get_compatibility(registration.subject) == "BACKWARD"


def test_registering_the_same_schema_twice_keeps_its_id(registry, topic) -> None:
    first = register(registry, topic, schema_for_topic("sensors.readings"))
    second = register(registry, topic, schema_for_topic("sensors.readings"))
    assert first.schema_id == second.schema_id


def _evolved(extra_field: dict) -> str:
    raw = json.loads(schema_for_topic("sensors.readings").text)
    raw["fields"].append(extra_field)
    return json.dumps(raw)


def test_a_compatible_change_is_accepted(registry, topic) -> None:
    register(registry, topic, schema_for_topic("sensors.readings"))
    evolved = register(registry, topic, _evolved(
        {"name": "quality", "type": "int", "default": 100}))
    assert evolved.version == 2


def test_an_incompatible_change_is_refused_with_the_registry_reason(registry, topic) -> None:
    register(registry, topic, schema_for_topic("sensors.readings"))
    # A new field without a default cannot read old data: not BACKWARD compatible.
    with pytest.raises(SchemaRefusedError) as refused:
        register(registry, topic, _evolved({"name": "quality", "type": "int"}))
    assert refused.value.status == 409
    assert refused.value.subject == subject_for(topic)
    assert refused.value.reason


def test_cli_shows_the_reason_of_a_refusal(registry, topic, tmp_path, federation) -> None:
    register(registry, topic, schema_for_topic("sensors.readings"))
    changed = tmp_path / "changed.avsc"
    changed.write_text(_evolved({"name": "quality", "type": "int"}))
    env = {"MEDUSA_EXTERNAL_KAFKA": ",".join(f"{k}={v}" for k, v in federation.kafka.items()),
           # the stack's logins: the command authenticates as admin
           "MEDUSA_CREDENTIALS_FILE": str(credentials.process_credentials_file()),
           "MEDUSA_EXTERNAL_REGISTRY_URL": federation.registry_url, "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-m", "medusa_apps", "schemas", "register", "--topic", topic,
         "--file", str(changed)],
        capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert "registry refused the schema" in result.stderr
    assert subject_for(topic) in result.stderr
