"""Authentication and authorisation on the real clusters: SCRAM principals, ACLs made from
contracts and placements by the stack's catalog, and tokens on the catalog and registry."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from medusa import contracts, credentials
from medusa.catalog.client import CatalogClient, CatalogForbiddenError
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from medusa.settings import StackSettings, kafka_config
from medusa.stack.components import authorizer_log
from medusa.stack.layout import StackLayout
from medusa.topics import ensure_topics
from medusa_spark.networks import network_yaml
from tests.waiting import first_within, wait_until

pytestmark = pytest.mark.integration

ACL_DELAY_S = 90.0
"""The catalog adds ACLs within a second of a change and removes them ``GRACE_S`` (30 s)
later; this is the tests' patience."""


@pytest.fixture
def as_participant(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Makes this test process act as a participant, as its nodes do."""
    def act(participant: str) -> None:
        monkeypatch.setenv(credentials.PARTICIPANT_VARIABLE, participant)
    return act


def _record(message: Message | None) -> Message | None:
    """The message when it is a record (not nothing, nor an error)."""
    return message if message is not None and message.error() is None else None


def _read(bootstrap: str, topic: str, timeout_s: float = 10.0) -> bytes | None:
    """The first record of the topic; None if none came (a refused fetch is not reported
    to an assigned consumer, so ``_refused`` asks for the topic's metadata instead)."""
    consumer = Consumer(kafka_config(bootstrap, {"group.id": f"medusa.test.{uuid.uuid4().hex}",
                                                 "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = first_within(lambda: _record(consumer.poll(0.5)), timeout_s, interval_s=0)
        return None if message is None else message.value()
    finally:
        consumer.close()


def _refused(bootstrap: str, topic: str) -> bool:
    """Whether the cluster refuses to even describe the topic to this principal."""
    metadata = AdminClient(kafka_config(bootstrap)).list_topics(topic=topic, timeout=10)
    error = metadata.topics[topic].error
    return error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.fixture
def alpha_fragment(federation: Endpoints) -> Iterator[dict[str, Any]]:
    """A fragment of alpha's on a stopped node of alpha's (nothing runs it), whose input
    topic on alpha's cluster holds one record, and a second topic it does not use."""
    tag = uuid.uuid4().hex[:8]
    name = f"acl-{tag}"
    used, unused = f"test.acl.{tag}.in", f"test.acl.{tag}.other"
    alpha = federation.bootstrap("alpha")
    ensure_topics(kafka_config(alpha), [used, unused], partitions=1)
    producer = Producer(kafka_config(alpha))
    for topic in (used, unused):
        producer.produce(topic, b"secret")
    assert producer.flush(30) == 0
    network = f"alpha/{name}"
    with CatalogClient(federation.catalog_url) as catalog:
        for node in (f"alpha/{name}-n", f"beta/{name}-n"):
            catalog.put(Kind.NODES, node, {"status": "down"})
        catalog.put(Kind.NETWORKS, network, {"definition": network_yaml(name, f"{tag}.")})
        fragment = f"{network}/f1"
        catalog.put(Kind.FRAGMENTS, fragment, {
            "network": network, "boxes": ["plausible"], "node": f"alpha/{name}-n",
            "reads": [{"participant": "alpha", "topic": used}],
            "writes": [{"participant": "alpha", "topic": f"test.acl.{tag}.out"}]})
        yield {"fragment": fragment, "network": network, "used": used, "unused": unused,
               "beta_node": f"beta/{name}-n", "alpha": alpha,
               "alpha_from_beta": federation.seen_from("beta").bootstrap("alpha")}
        for kind, entity in ((Kind.FRAGMENTS, fragment), (Kind.NETWORKS, network),
                             (Kind.NODES, f"alpha/{name}-n"), (Kind.NODES, f"beta/{name}-n")):
            catalog.delete(kind, entity)
        for entry in catalog.list(Kind.CONTRACTS, participant="alpha"):
            if entry.spec["movable"] == [network]:
                catalog.delete(Kind.CONTRACTS, entry.name)


def test_a_client_without_credentials_is_turned_away(federation: Endpoints) -> None:
    admin = AdminClient({"bootstrap.servers": federation.bootstrap("alpha"), "log_level": 0,
                         "socket.timeout.ms": 2000})
    with pytest.raises(Exception):  # noqa: B017 (librdkafka's transport failure)
        admin.list_topics(timeout=3)


def test_an_accepted_contract_opens_the_fragments_topics_and_its_end_closes_them(
        federation: Endpoints, alpha_fragment: dict[str, Any],
        as_participant: Callable[[str], None]) -> None:
    topic, through_link = alpha_fragment["used"], alpha_fragment["alpha_from_beta"]
    as_participant("beta")
    assert _refused(through_link, topic)
    os.environ.pop(credentials.PARTICIPANT_VARIABLE)
    with CatalogClient(federation.catalog_url) as catalog:
        # One-second periods: revoked, it ends within a second.
        contract = contracts.propose(catalog, f"acl-{uuid.uuid4().hex[:6]}", origin="alpha",
                                     host="beta", price=1.0, delta=0.0,
                                     movable=[alpha_fragment["network"]], period_s=1.0,
                                     by="alpha")
        contracts.accept(catalog, contract.name, by="beta")
    as_participant("beta")
    wait_until("beta reads the fragment's input once the contract is accepted",
               lambda: _read(through_link, topic) == b"secret", ACL_DELAY_S)
    assert _refused(through_link, alpha_fragment["unused"])
    os.environ.pop(credentials.PARTICIPANT_VARIABLE)
    with CatalogClient(federation.catalog_url) as catalog:
        contracts.revoke(catalog, contract.name, by="alpha")
    as_participant("beta")
    wait_until("the ended contract's access is gone",
               lambda: _refused(through_link, topic), ACL_DELAY_S)


def test_placing_a_fragment_on_a_partners_node_opens_its_topics_and_the_attempt_is_logged(
        federation: Endpoints, local_federation, alpha_fragment: dict[str, Any],
        as_participant: Callable[[str], None]) -> None:
    topic, through_link = alpha_fragment["used"], alpha_fragment["alpha_from_beta"]
    with CatalogClient(federation.catalog_url) as catalog:
        catalog.update(Kind.FRAGMENTS, alpha_fragment["fragment"],
                       lambda spec: {**spec, "node": alpha_fragment["beta_node"]}
                       if spec else None)
    as_participant("beta")
    wait_until("beta reads the input of the fragment placed on its node",
               lambda: _read(through_link, topic) == b"secret", ACL_DELAY_S)
    assert _refused(through_link, alpha_fragment["unused"])
    layout = local_federation.layout if local_federation is not None \
        else StackLayout.from_settings(StackSettings())
    refused = authorizer_log(layout, layout.participant("alpha").broker_layouts[0])
    # The session's launcher started the brokers, so their refusal log must be there; with
    # brokers given by MEDUSA_EXTERNAL_KAFKA it is theirs to keep.
    if local_federation is not None or refused.is_file():
        wait_until("the refusal is in alpha's log",
                   lambda: "User:beta is Denied operation = DESCRIBE" in refused.read_text()
                   and alpha_fragment["unused"] in refused.read_text(), ACL_DELAY_S)


def test_catalog_writes_need_the_token_of_a_principal_allowed_to_make_them(
        federation: Endpoints, as_participant: Callable[[str], None]) -> None:
    with CatalogClient(federation.catalog_url, anonymous=True) as anonymous, \
            pytest.raises(CatalogForbiddenError, match="token"):
        anonymous.put(Kind.NODES, "alpha/acl-anonymous", {"status": "down"})
    as_participant("beta")
    with CatalogClient(federation.catalog_url) as beta:
        with pytest.raises(CatalogForbiddenError, match="participant beta cannot change node"):
            beta.put(Kind.NODES, "alpha/acl-intruder", {"status": "down"})
        name = f"beta/acl-{uuid.uuid4().hex[:6]}"
        assert beta.put(Kind.NODES, name, {"status": "down"}).version == 1
        beta.delete(Kind.NODES, name)


def test_registry_writes_need_a_participants_token(federation: Endpoints) -> None:
    subject = f"test.acl.{uuid.uuid4().hex[:8]}-value"
    url = f"{federation.registry_url}/subjects/{subject}/versions"
    body = {"schema": '"string"'}
    assert httpx.post(url, json=body, timeout=30).status_code == 401
    assert httpx.get(f"{federation.registry_url}/subjects", timeout=30).status_code == 200
    token = credentials.own_token()
    assert token is not None
    answer = httpx.post(url, json=body, auth=token, timeout=30)
    assert answer.status_code == 200, answer.text


def test_a_cli_command_acts_as_the_participant_it_is_told(
        federation: Endpoints, alpha_fragment: dict[str, Any]) -> None:
    import subprocess
    import sys

    def undeploy_as(participant: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "medusa_apps", "--as", participant,
                               "undeploy", alpha_fragment["network"]],
                              capture_output=True, text=True, timeout=120, check=False)
    refused = undeploy_as("beta")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "participant beta cannot remove fragment" in refused.stderr
    with CatalogClient(federation.catalog_url) as catalog:
        assert catalog.get(Kind.FRAGMENTS, alpha_fragment["fragment"]) is not None
