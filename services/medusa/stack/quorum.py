"""Which broker of a participant's cluster is its active KRaft controller."""

from __future__ import annotations

import re
import subprocess

from medusa.errors import MedusaError
from medusa.stack.components import INFRA, client_properties_file, java_binary, kafka_libs
from medusa.stack.layout import BrokerLayout, ParticipantLayout, StackLayout


class QuorumError(MedusaError, RuntimeError):
    """The cluster did not say who leads its metadata quorum."""


def active_controller(layout: StackLayout, participant: ParticipantLayout,
                      timeout_s: float = 60.0) -> BrokerLayout:
    """The broker whose controller leads the quorum now (Kafka's metadata quorum tool)."""
    with client_properties_file(participant.bootstrap) as config:
        described = subprocess.run(
            [java_binary(layout), "-Xmx128m",
             f"-Dlog4j2.configurationFile={INFRA / 'kafka' / 'log4j2.properties'}",
             "-Dmedusa.kafka.log.level=WARN", "-cp", f"{kafka_libs(layout)}/*",
             "org.apache.kafka.tools.MetadataQuorumCommand",
             "--bootstrap-server", participant.bootstrap, "--command-config", str(config),
             "describe", "--status"],
            capture_output=True, text=True, timeout=timeout_s, check=False)
    leader = re.search(r"^LeaderId:\s+(\d+)", described.stdout, re.MULTILINE)
    if described.returncode != 0 or leader is None:
        output = (described.stderr or described.stdout).strip().splitlines()
        raise QuorumError(f"the metadata quorum of {participant.name}'s cluster did not answer: "
                          f"{' / '.join(output[-2:])}")
    node_id = int(leader.group(1))
    for broker in participant.broker_layouts:
        if broker.node_id == node_id:
            return broker
    raise QuorumError(f"{participant.name}'s quorum is led by node {node_id}, not one of its "
                      "brokers")
