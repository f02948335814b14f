"""The example networks the data plane ships (``*.yaml`` here), read as package data.

``medusa deploy`` takes any network file; these are the ones the demo, the benchmarks and
the tests run. They are read through ``importlib.resources``, not by a path in a
checkout, so an installed package has them too. The sensor-windows builders give the
example under another name, on topics of its own (``medusa.sensor_windows`` has its input
and reference results).
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from medusa.sensor_windows import CHAIN_WINDOW_MS

SENSOR_WINDOWS = "sensor_windows.yaml"
SENSOR_PAIR = "sensor_pair.yaml"
LINEAR_ROAD = "linear_road.yaml"
LINEAR_ROAD_PARTITIONED = "linear_road_partitioned.yaml"


def network_file(name: str) -> Traversable:
    """The shipped network ``name`` (e.g. ``SENSOR_WINDOWS``)."""
    return files(__name__).joinpath(name)


def network_text(name: str) -> str:
    """The definition (YAML) of the shipped network ``name``."""
    return network_file(name).read_text(encoding="utf-8")


def network_yaml(name: str, topic_prefix: str, ha: str | None = None,
                 fragments: dict[str, str] | None = None, box_participant: str | None = None,
                 **overrides: Any) -> str:
    """The sensor-windows example under another name, on topics of its own (every box with
    ``ha`` when given, and of ``box_participant``; ``fragments`` names the fragment of some
    boxes)."""
    raw = yaml.safe_load(network_text(SENSOR_WINDOWS))
    raw.update(name=name, topic_prefix=topic_prefix, **overrides)
    for box_name, box in raw["boxes"].items():
        if ha is not None:
            box["ha"] = ha
        if box_participant is not None:
            box["participant"] = box_participant
        if fragments and box_name in fragments:
            box["fragment"] = fragments[box_name]
    return yaml.safe_dump(raw, sort_keys=False)


def pair_network_yaml(name: str, topic_prefix: str, availability_bound: str) -> str:
    """The pair example (two sensor streams, one per participant, merged and averaged on
    beta with DPC) under another name, on topics of its own, with its own bound."""
    raw = yaml.safe_load(network_text(SENSOR_PAIR))
    raw.update(name=name, topic_prefix=topic_prefix, availability_bound=availability_bound)
    return yaml.safe_dump(raw, sort_keys=False)


REALTIME_PAIR_PREDICATE = "kind <> 'vibration'"
"""What the real-time pair network's filter keeps (``realtime_pair_network_yaml``)."""


def realtime_pair_network_yaml(name: str, topic_prefix: str, availability_bound: str) -> str:
    """The pair example made stateless, in Real-time Mode with DPC: the two participants'
    readings merged on beta and filtered (``REALTIME_PAIR_PREDICATE``), each passed on as
    it comes, tentative while alpha's are cut off and corrected in the stream after."""
    raw = yaml.safe_load(pair_network_yaml(name, topic_prefix, availability_bound))
    raw["execution"] = "real-time"
    raw["bucket"] = "100 milliseconds"
    del raw["boxes"]["per_sensor"]
    raw["boxes"]["kept"] = {"type": "filter", "participant": "beta",
                            "params": {"predicate": REALTIME_PAIR_PREDICATE}}
    raw["arrows"] = [a for a in raw["arrows"] if a["to"] != "per_sensor"] + [
        {"from": "merged", "to": "kept"}]
    return yaml.safe_dump(raw, sort_keys=False)


def chain_network_yaml(name: str, topic_prefix: str, availability_bound: str) -> str:
    """The pair example with a second fragment downstream, on alpha: per sensor and 20-second
    window, the sums of beta's 10-second results (what beta marks tentative, alpha's results
    inherit; what beta corrects, alpha corrects); ``medusa.sensor_windows.chain_reference``
    computes its results."""
    raw = yaml.safe_load(pair_network_yaml(name, topic_prefix, availability_bound))
    raw["boxes"]["per_sensor_20s"] = {
        "type": "aggregate", "participant": "alpha", "key": ["sensor_id"],
        "params": {
            "window": {"type": "tumbling", "size": f"{CHAIN_WINDOW_MS // 1000} seconds"},
            "group_by": ["sensor_id"],
            "aggregates": {"windows": {"count": "readings"}, "readings": {"sum": "readings"},
                           "total": {"sum": "total"}},
            "fields": {"sensor_id": "sensor_id", "windows": "windows", "readings": "readings",
                       "total": "ROUND(total, 6)",
                       "window_start_ms": "unix_millis(window_start)"}}}
    raw["arrows"].append({"from": "per_sensor", "to": "per_sensor_20s"})
    return yaml.safe_dump(raw, sort_keys=False)
