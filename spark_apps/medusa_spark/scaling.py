"""Scaling a keyed stateful fragment out and in at run time: N instances, each owning the
keys that hash to it.

Spark cannot change a running query's parallelism, nor split or merge the state in its
checkpoint, so a scale step replaces the fragment's instances by new ones, which rebuild
their state from the input the way upstream backup recovers a box. It makes the new
instances before it breaks the old ones, so the output does not pause:

1. X is the newest stime the old instances' SUnions have released, and S0 = X minus the
   fragment's window span (the longest a result waits for its inputs, summed along its
   stateful boxes): every window still open at X or later began at or after S0.
2. Each new instance gets its own SUnion, topic and checkpoint (phase ``warming``). Its
   SUnion starts at the inputs' positions of S0, read back from the old instances'
   SUnion topics (their released buckets carry the positions), and its query keeps only
   the rows whose key hashes to it (xxhash64 of the key fields, modulo N): its state
   holds its keys alone. It runs as a standby beside the old instances, writing nothing,
   until it has caught up with its input (``warm_ready``).
3. The cut: each old instance is asked to write no result from X' on (``emit_until_ms``),
   X' as far past the newest stime its SUnion has released by then as the input goes in
   ``SWITCH_AHEAD_S``; its node answers
   with the stime from which it writes none (``emit_cut_ms``: X', or past what it has
   written already). W is the largest answer, and every old instance's cut is raised
   to W.
4. The new instances take over: each writes its results from W on (the ones it holds
   already at once, then as they come); the old instances write theirs below W until
   their outputs have promised W, then stop (``retiring``, ``retired``). Every result
   is written by exactly one side, and the SOutput's deduplication by tuple id stands
   behind that.

Each instance is a fragment entry of its own (``<fragment>--g<step>-<index>``), so it is
placed, moved, reported on and taken over after a node failure like any fragment.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.endpoints import Endpoints
from medusa.envelope import STIME_HEADER
from medusa.settings import END_OF_LOG_FETCH_WAIT_MS, kafka_config
from medusa.sunion.service import positions_before
from medusa.topics import partition_count
from medusa_spark.durations import duration_ms
from medusa_spark.network.fragments import read_elsewhere
from medusa_spark.network.model import NetworkSpec, parse_network

Report = Callable[[str], None]
MAX_INSTANCES = 16
SWITCH_AHEAD_S = 6.0
"""The cut is as far past the newest stime the old instances have read as the input goes
in this long (at its rate during the step): longer than the switch takes (the old
nodes' answer, the new ones' promotion), so the new instances write before the input
reaches it."""
SWITCH_POLL_S = 0.05
"""How often a scale step reads the catalog while it switches (the switch's gap)."""


def instance_base_topic(topic: str | None) -> str:
    """A fragment's SUnion topic without an instance's ``--g<step>-<index>`` suffix."""
    return re.sub(r"--g\d+-\d+$", "", str(topic or ""))


class ScaleError(CatalogError):
    """A scale step that cannot be done, named with the reason."""


@dataclass(frozen=True)
class ScaleResult:
    fragment: str
    before: list[str]
    after: list[str]
    """The instances' catalog names, with their nodes."""
    emit_from_ms: int
    replay_from_ms: int
    seconds: float


def instances_of(catalog: CatalogClient, network: str, fragment: str) -> list[Entry]:
    """The entries that run ``fragment`` now: the fragment itself, or its instances."""
    found = [e for e in catalog.list(Kind.FRAGMENTS, network=network)
             if e.name == f"{network}/{fragment}" or
             (e.spec.get("instance") or {}).get("of") == fragment]
    return sorted(found, key=lambda e: (e.spec.get("instance") or {}).get("index", 0))


def fragment_key(spec: NetworkSpec, boxes: list[str], fragment: str,
                 unkeyed: bool = False) -> list[str]:
    """The key the fragment's state is partitioned by: its process box's ``params.key``
    (its ports' keys only key their records), else the one its boxes declare.

    Refused, naming the box: boxes that declare different keys, a fragment that declares
    none (unless ``unkeyed``: one instance replacing one, by a redeploy, needs no key and
    gets []), a session window (its span has no bound), and, under DPC, an output read by
    another fragment.
    """
    declared = {box: list(spec.boxes[box].params.get("key") or []) for box in boxes
                if spec.boxes[box].type == "process" and spec.boxes[box].params.get("key")}
    if not declared:
        declared = {box: spec.boxes[box].key for box in boxes if spec.boxes[box].key}
    if not declared and not unkeyed:
        raise ScaleError(f"fragment {fragment}: no box declares a key (box field 'key'); "
                         "only a keyed fragment can be split between instances")
    keys = {tuple(k) for k in declared.values()} or {()}
    if len(keys) > 1:
        raise ScaleError(f"fragment {fragment}: its boxes declare different keys "
                         f"({', '.join(f'{b}: {k}' for b, k in declared.items())})")
    for box in boxes:
        window = (spec.boxes[box].params or {}).get("window") or {}
        if window.get("type") == "session":
            raise ScaleError(f"box {box!r}, field 'params.window': a session window has no "
                             "bounded span; a fragment with one cannot be scaled")
    if spec.availability_bound is not None:
        for box, reader in read_elsewhere(spec, boxes).items():
            raise ScaleError(f"box {box!r}: its output feeds box {reader!r} of another "
                             "fragment; scaling such a fragment under DPC is not supported")
    return list(next(iter(keys)))


def keyed_input_partitions(spec: NetworkSpec, boxes: list[str], key: list[str],
                           endpoints: Endpoints) -> int:
    """The partitions of the fragment's input when it has one, a stream its producers key
    by the fragment's key (so that each partition holds whole keys); else 0."""
    inside = set(boxes)
    sources = {a.source for a in spec.arrows
               if _box_of(a.target) in inside and a.source not in inside}
    if len(sources) != 1:
        return 0
    stream = spec.streams.get(next(iter(sources)))
    if stream is None or list(stream.key) != list(key):
        return 0
    return _partitions(endpoints, stream.participant, f"{spec.topic_prefix}{stream.topic}")


def _partitions(endpoints: Endpoints, participant: str, topic: str) -> int:
    """How many partitions ``topic`` has on ``participant``'s cluster; 0 if it has none."""
    try:
        return partition_count(kafka_config(endpoints.bootstrap(participant)), topic)
    except RuntimeError:  # not there (yet)
        return 0


def _box_of(target: str) -> str:
    """The box an arrow goes to (``join.left`` names a box and its input port)."""
    return target.split(".", 1)[0]


def window_span_ms(spec: NetworkSpec, boxes: list[str]) -> int | None:
    """How far back a result of the fragment reaches: the windows' sizes and the joins'
    time bounds of its boxes, summed (a bound on any chain of them); None when a process
    box keeps state without a bound (Linear Road's cars, accounts and accidents)."""
    span = 0
    for box in boxes:
        if spec.boxes[box].type == "process":
            return None
        params = spec.boxes[box].params or {}
        window = params.get("window") or {}
        if window.get("size"):
            span += duration_ms(str(window["size"]))
        for name in ("within", "bound", "interval"):
            if isinstance(params.get(name), str):
                span += duration_ms(params[name])
            elif isinstance(params.get(name), dict):  # a join's {lower, upper}
                span += max(abs(duration_ms(str(v))) for v in params[name].values())
    return span


def _shared_outputs_fit(spec: NetworkSpec, boxes: list[str], count: int,
                        endpoints: Endpoints) -> None:
    """Each output another fragment reads is written one instance per partition: it needs
    a partition for every instance."""
    for box in read_elsewhere(spec, boxes):
        stream = next((a.target for a in spec.arrows
                       if a.source == box and a.target in spec.streams), None)
        if stream is None:
            topic, participant = (f"{spec.topic_prefix}{spec.intermediate_topic(box)}",
                                  spec.boxes[box].participant or spec.participant)
        else:
            topic = f"{spec.topic_prefix}{spec.streams[stream].topic}"
            participant = spec.streams[stream].participant
        partitions = _partitions(endpoints, participant, topic)
        if partitions < count:
            raise ScaleError(f"box {box!r}: another fragment reads its output {topic}, which "
                             f"each instance writes partitions of its own; it has {partitions} "
                             f"partition(s), fewer than {count} instances")


def scale(catalog: CatalogClient, endpoints: Endpoints, name: str, count: int,
          nodes: list[str] | None = None, timeout_s: float = 300.0,
          report: Report = print, redefined: dict[str, Any] | None = None) -> ScaleResult:
    """Runs fragment ``name`` (``participant/network/fragment``) as ``count`` instances on
    ``nodes`` (by default the running nodes of its participant, fewest fragments first),
    and waits until they all run.

    ``redefined``: the fragment's entry fields under a new definition of the network,
    already in the catalog (``boxes``, ``source_topic``, ``reads``...): a redeploy that
    replaces the old instances, which run the definition they had, by instances of the
    new one (``deploy --make-before-break``)."""
    if not 1 <= count <= MAX_INSTANCES:
        raise ScaleError(f"--to: expected 1 to {MAX_INSTANCES} instances, got {count}")
    parts = name.split("/")
    if len(parts) != 3:
        raise ScaleError(f"expected participant/network/fragment, got {name!r}")
    network, fragment = f"{parts[0]}/{parts[1]}", parts[2].split("--")[0]
    started = time.monotonic()
    entry = catalog.get(Kind.NETWORKS, network)
    if entry is None:
        raise ScaleError(f"no network {network} in the catalog")
    spec = parse_network(entry.spec["definition"], origin=f"network {network}")
    refusal = spec.sunion_in_query_refusal(network, "scaled")
    if refusal is not None:
        raise ScaleError(refusal)
    old = instances_of(catalog, network, fragment)
    if not old:
        raise ScaleError(f"no fragment {network}/{fragment} in the catalog")
    boxes = list((redefined or old[0].spec)["boxes"])
    # A redeploy replacing one instance by one needs no key: the new one reads everything.
    key = fragment_key(spec, boxes, fragment,
                       unkeyed=redefined is not None and count == len(old) == 1)
    busy = [e for e in old if e.spec.get("phase") != "running"]
    if busy:
        raise ScaleError(f"fragment {busy[0].name} is {busy[0].spec.get('phase')}; wait until "
                         "it runs")
    window = window_span_ms(spec, boxes)
    _shared_outputs_fit(spec, boxes, count, endpoints)
    by_partition = not key or keyed_input_partitions(spec, boxes, key, endpoints) >= count
    placed = _nodes_for(catalog, old[0].spec["node"].split("/")[0], count, nodes)
    generation = 1 + max((e.spec.get("instance") or {}).get("generation", 0) for e in old)
    report(f"  {network}/{fragment}: {len(old)} instance(s) -> {count}, on "
           f"{', '.join(placed)}; each "
           + ("reads its share of the input's partitions" if by_partition else
              "reads all the input and keeps its keys' rows"))

    deadline = started + timeout_s
    sources = [_sunion_source(endpoints, e) for e in old]
    switch_from = max((newest_stime(bootstrap, topic) for bootstrap, topic in sources),
                      default=0)
    read_at = time.monotonic()
    if window is None:  # state without a bound: rebuilt from the whole input
        replay_from, positions = 0, {}
        report(f"  the new instances rebuild their state from the start of the input (a "
               f"process box's state has no bounded span) beside the old ones, to write "
               f"from stime {switch_from} or later")
    else:
        replay_from = max(0, switch_from - window - duration_ms(spec.bucket))
        positions = _positions_at(sources, replay_from)
        report(f"  the new instances rebuild their state from stime {replay_from} beside "
               f"the old ones, to write from stime {switch_from} or later")

    template = {k: v for k, v in old[0].spec.items()
                if k in ("network", "boxes", "ha", "dpc_state", "dpc_delay_ms", "reads",
                         "writes")}
    if redefined is not None:
        template.update({k: v for k, v in redefined.items() if k != "source_topic"})
    base_topic = instance_base_topic((redefined or old[0].spec).get("source_topic"))
    created = []
    for index, node in enumerate(placed):
        instance = {"of": fragment, "index": index, "count": count, "generation": generation,
                    "key": key, "emit_from_ms": switch_from, "start_positions": positions,
                    "by_partition": by_partition}
        entry_name = f"{network}/{fragment}--g{generation}-{index}"
        topic = {"source_topic": f"{base_topic}--g{generation}-{index}"} if base_topic else {}
        catalog.put(Kind.FRAGMENTS, entry_name, {**template, **topic, "node": node,
                                                 "phase": "warming", "instance": instance})
        created.append(entry_name)
    try:
        _wait_for(catalog, created, lambda spec: bool(spec.get("warm_ready")), deadline,
                  "the new instances did not catch up with their input in time")
        report(f"  caught up: {', '.join(created)}")
        # Ahead of the input by what it brings in SWITCH_AHEAD_S: the old instances write
        # on while the new ones are told to take over, so neither side pauses.
        newest = max(switch_from, *(newest_stime(bootstrap, topic)
                                    for bootstrap, topic in sources))
        per_s = (newest - switch_from) / max(1.0, time.monotonic() - read_at)
        cut = _cut(catalog, old, newest + max(duration_ms(spec.bucket),
                                              int(per_s * SWITCH_AHEAD_S)), deadline)
    except BaseException:
        _give_up(catalog, created, old)
        raise
    # The switch: the new instances write from the cut on, the old ones below it.
    for entry_name in created:
        catalog.update(Kind.FRAGMENTS, entry_name, partial(_take_over, cut))
    report(f"  the new instances write the results from stime {cut} on")
    retired = _retire(catalog, old, deadline, report)
    for entry_name in created:  # the old instances have promised the cut: promise on
        catalog.update(Kind.FRAGMENTS, entry_name, _promise_on)
    # An old instance whose input went quiet stops short of the cut: the new instances
    # write the results it left (their windows close once the input comes).
    short = min((int(e.spec["retired_watermark_ms"]) for e in retired
                 if e.spec.get("retired_watermark_ms") is not None), default=cut)
    if short < cut:
        for entry_name in created:
            catalog.update(Kind.FRAGMENTS, entry_name, partial(_start_at, short))
        report(f"  the input is quiet: the new instances write the results from stime "
               f"{short} on")
    for gone in old:
        catalog.delete(Kind.FRAGMENTS, gone.name)
    _wait_running(catalog, created, deadline, report)
    return ScaleResult(f"{network}/{fragment}", [f"{e.name} on {e.spec['node']}" for e in old],
                       [f"{n} on {node}" for n, node in zip(created, placed, strict=True)],
                       cut, replay_from, time.monotonic() - started)


def _sunion_source(endpoints: Endpoints, entry: Entry) -> tuple[str, str]:
    """The cluster and topic of an instance's SUnion."""
    topic = entry.spec.get("source_topic")
    if not topic:
        raise ScaleError(f"fragment {entry.name}: the catalog does not say its SUnion's "
                         "topic (deployed by an older version); redeploy the network")
    return endpoints.bootstrap(str(entry.spec["node"]).split("/")[0]), str(topic)


def _take_over(cut: int, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """A new instance writes from ``cut`` on, promising no further than the cut on the
    outputs another fragment reads until the old instances have promised it (that
    reader's SUnion would take a new instance's BOUNDARY for the partition's)."""
    if spec is None or spec.get("phase") != "warming":
        raise ScaleError("a new instance was withdrawn or failed during the scale step")
    return {**spec, **_instance_from(cut, spec), "phase": "placed", "promise_hold_ms": cut}


def _promise_on(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if spec is None else {**spec, "promise_hold_ms": None}


def _start_at(stime: int, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if spec is None else {**spec, **_instance_from(stime, spec)}


def _instance_from(stime: int, spec: dict[str, Any]) -> dict[str, Any]:
    """The ``instance`` field of a new instance that writes its results from ``stime`` on."""
    return {"instance": {**spec["instance"], "emit_from_ms": stime}}


def _cut(catalog: CatalogClient, old: list[Entry], at_least: int, deadline: float) -> int:
    """Asks the old instances to write no result from ``at_least`` on; returns the cut they
    agreed to (the furthest answer, to which every old instance is raised)."""
    def ask(stime: int, spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None:
            raise ScaleError("an instance was withdrawn during the scale step")
        return {**spec, "emit_until_ms": stime, "emit_cut_ms": None}
    for entry in old:
        catalog.update(Kind.FRAGMENTS, entry.name, partial(ask, at_least))
    answers = _wait_for(catalog, [e.name for e in old],
                        lambda spec: spec.get("emit_cut_ms") is not None, deadline,
                        "the old instances' nodes did not answer the scale step's cut")
    cut = max(int(spec["emit_cut_ms"]) for spec in answers.values())
    for name, spec in answers.items():
        if int(spec["emit_cut_ms"]) < cut:  # a raised cut: its node applies it on retiring
            catalog.update(Kind.FRAGMENTS, name, partial(ask, cut))
    return cut


def _give_up(catalog: CatalogClient, created: list[str], old: list[Entry]) -> None:
    """A scale step that failed before its switch: the new instances go, the old ones
    write on as before."""
    for name in created:
        with contextlib.suppress(CatalogError):
            catalog.delete(Kind.FRAGMENTS, name)

    def lifted(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None or spec.get("emit_until_ms") is None:
            return None
        return {**spec, "emit_until_ms": None, "emit_cut_ms": None}
    for entry in old:
        with contextlib.suppress(CatalogError):
            catalog.update(Kind.FRAGMENTS, entry.name, lifted)


def _wait_for(catalog: CatalogClient, names: list[str],
              done: Callable[[dict[str, Any]], bool], deadline: float, failure: str
              ) -> dict[str, dict[str, Any]]:
    """Every entry's spec once ``done`` holds for all of them."""
    specs: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        for name in names:
            entry = catalog.get(Kind.FRAGMENTS, name)
            if entry is None:
                raise ScaleError(f"{name} was withdrawn during the scale step")
            if entry.spec.get("phase") == "failed":
                raise ScaleError(f"{name} failed during the scale step: "
                                 f"{entry.spec.get('error')}")
            specs[name] = entry.spec
        if all(done(spec) for spec in specs.values()):
            return specs
        time.sleep(SWITCH_POLL_S)
    raise TimeoutError(f"{failure}; see the nodes' logs and medusa status")


def _wait_running(catalog: CatalogClient, names: list[str], deadline: float,
                  report: Report) -> None:
    while time.monotonic() < deadline:
        phases = {n: (e.spec.get("phase") if (e := catalog.get(Kind.FRAGMENTS, n)) else None)
                  for n in names}
        if all(p == "running" for p in phases.values()):
            report(f"  running: {', '.join(names)}")
            return
        time.sleep(0.3)
    raise TimeoutError(f"the new instances did not all run in time ({phases}); see the "
                       "nodes' logs and medusa status")


def _nodes_for(catalog: CatalogClient, participant: str, count: int,
               given: list[str] | None) -> list[str]:
    up = {e.name: e for e in catalog.list(Kind.NODES) if e.spec.get("status") == "up"}
    if given:
        unknown = [n for n in given if n not in up]
        if unknown:
            raise ScaleError(f"--nodes: {', '.join(unknown)} is not a running node")
        return [given[i % len(given)] for i in range(count)]
    load: dict[str, int] = {n: 0 for n in up if n.startswith(f"{participant}/")}
    if not load:
        raise ScaleError(f"participant {participant} has no running node")
    for fragment in catalog.list(Kind.FRAGMENTS):
        if fragment.spec["node"] in load:
            load[fragment.spec["node"]] += 1
    ranked = sorted(load, key=lambda n: (load[n], n))
    return [ranked[i % len(ranked)] for i in range(count)]


def _retire(catalog: CatalogClient, old: list[Entry], deadline: float,
            report: Report) -> list[Entry]:
    """Stops every old instance at a batch boundary; returns their entries once retired."""
    for entry in old:
        def retiring(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None:
                raise ScaleError("an instance was withdrawn during the scale step")
            if spec.get("phase") not in ("running", "placed", "retiring", "retired"):
                raise ScaleError(f"fragment is {spec.get('phase')}; wait until it runs")
            return None if spec.get("phase") in ("retiring", "retired") else \
                {**spec, "phase": "retiring"}
        catalog.update(Kind.FRAGMENTS, entry.name, retiring)
    while time.monotonic() < deadline:
        current = [catalog.get(Kind.FRAGMENTS, e.name) for e in old]
        if all(c is not None and c.spec.get("phase") == "retired" for c in current):
            report(f"  stopped {', '.join(e.name for e in old)}")
            return [c for c in current if c is not None]
        time.sleep(0.2)
    raise TimeoutError("the old instances did not stop in time; see the nodes' logs")


def _positions_at(sources: list[tuple[str, str]], stime_ms: int
                  ) -> dict[str, dict[str, int]]:
    """Input -> partition -> offset from which the inputs hold every tuple of stime
    ``stime_ms`` or later: the earliest over the old instances' SUnion topics."""
    positions: dict[str, dict[str, int]] = {}
    for bootstrap, topic in sources:
        offset = first_offset_at(bootstrap, topic, stime_ms)
        found = positions_before(bootstrap, topic, {0: offset}) if offset else None
        for name, described in ((found or {}).get("inputs") or {}).items():
            for partition, where in (described.get("partitions") or {}).items():
                resume = int(where.get("resume", where.get("read", 0)))
                mine = positions.setdefault(name, {})
                mine[str(partition)] = min(resume, mine.get(str(partition), resume))
    return positions


def newest_stime(bootstrap: str, topic: str, records: int = 200) -> int:
    """The newest stime among the last committed records of a SUnion topic (0 if none)."""
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"medusa.scale.{time.time_ns()}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True,
        "fetch.wait.max.ms": END_OF_LOG_FETCH_WAIT_MS}))
    newest = 0
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if high <= low:
            return 0
        consumer.assign([TopicPartition(topic, 0, max(low, high - records))])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(error)
            stime = _stime_of(message)
            newest = max(newest, stime or 0)
        return newest
    finally:
        consumer.close()


def _stime_of(message: Any) -> int | None:
    raw = message.headers() or []
    headers = list(raw.items()) if isinstance(raw, dict) else list(raw)
    for name, value in headers:
        if name == STIME_HEADER and value:
            return int(value.decode() if isinstance(value, bytes) else str(value))
    return None


def first_offset_at(bootstrap: str, topic: str, stime_ms: int) -> int:
    """The first offset of a SUnion topic (one partition, buckets in stime order) whose
    record has a stime of ``stime_ms`` or later (binary search; the end if none)."""
    # Each probe is a fetch: at the client's default wait (500 ms) a search over a long
    # topic cost a scale step many seconds.
    consumer = Consumer(kafka_config(bootstrap, **{
        "group.id": f"medusa.scale.{time.time_ns()}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "fetch.wait.max.ms": END_OF_LOG_FETCH_WAIT_MS}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        while low < high:  # the smallest offset whose next committed record is late enough
            middle = (low + high) // 2
            found = _stime_at(consumer, topic, middle)
            if found is None or found[1] >= stime_ms:
                high = middle
            else:
                low = middle + 1
        return low
    finally:
        consumer.close()


def _stime_at(consumer: Consumer, topic: str, offset: int) -> tuple[int, int] | None:
    """(offset, stime) of the first committed record at or after ``offset``."""
    consumer.assign([TopicPartition(topic, 0, offset)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            raise KafkaException(message.error())
        stime = _stime_of(message)
        return int(message.offset() or 0), stime or 0
    return None
