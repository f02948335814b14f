import pytest
from pydantic import SecretStr, ValidationError

from medusa.settings import KafkaClientSettings, StackSettings
from medusa.stack.layout import StackLayout

pytestmark = pytest.mark.unit


def test_librdkafka_keys_come_from_field_names() -> None:
    settings = KafkaClientSettings(bootstrap_servers="h:1", sasl_mechanism="PLAIN",
                                   sasl_username="u", sasl_password=SecretStr("p"))
    config = settings.librdkafka(linger_ms=5)
    assert config == {"bootstrap.servers": "h:1", "client.id": "medusa",
                      "security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN",
                      "sasl.username": "u", "sasl.password": "p", "linger.ms": 5}


def test_stack_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDUSA_STACK_PARTICIPANTS", "3")
    monkeypatch.setenv("MEDUSA_KAFKA_BASE_PORT", "30000")
    layout = StackLayout.from_settings(StackSettings())
    assert [p.name for p in layout.participants] == ["alpha", "beta", "gamma"]
    assert [p.bootstrap for p in layout.participants] == [
        "127.0.0.1:30000", "127.0.0.1:30010", "127.0.0.1:30020"]
    # brokers and controllers; registry, Jaeger, catalog, detector
    assert len(layout.all_ports()) == 6 + 10


def test_bad_setting_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDUSA_STACK_PARTICIPANTS", "zero")
    with pytest.raises(ValidationError, match="stack_participants"):
        StackSettings()
