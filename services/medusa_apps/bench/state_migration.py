"""Moving a stateful fragment under steady input: the pause in its output against the size of
its state, from megabytes to a gigabyte, warm (the default) and cold side by side.

Two nodes of participant alpha (and one of beta, for a warm move onto a partner's node
under a contract) run one fragment of two windowed aggregates over the same readings:
``per_sensor``, a sliding window whose results come every slide (the output whose pause is
measured), and ``ballast``, which keeps one large value per key for a day (the state that
has to move), by default with Spark's own aggregation (``expiry: scan``), whose every
batch goes through the whole state; the largest state is also moved warm with the
ballast's windows expiring by timers (``expiry: timers``), side by side. A fill phase
sends the ballast, then the fragment is moved from one node to the other. The pause
is the longest gap between results from the request until the move is
done (a warm move hands over at its end); the gaps in the two minutes before say what the
output does without a move."""

from __future__ import annotations

import base64
import itertools
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.contracts import accept, propose, revoke
from medusa.endpoints import Endpoints
from medusa.federation_status import batch_phases_of, latest_load_reports
from medusa.producing import TupleProducer
from medusa.schemas import schema_for_topic
from medusa.sensor_windows import STIME_ORIGIN_MS, OutputWatch
from medusa.sensors import SENSOR_READINGS, SensorReading, sensor_readings, to_dict
from medusa.settings import kafka_config
from medusa.stack import processes
from medusa.stack.layout import StackLayout
from medusa.topics import delete_topics_named, ensure_topics
from medusa_apps.bench.nodes import start_node
from medusa_spark.checkpoints import checkpoint_size, delete_checkpoint
from medusa_spark.deploy import deploy, move, resolve_fragment, undeploy, wait_for_node

SLIDE_S = 2
WINDOW_S = 30
SENSORS = 50
PAYLOAD_BYTES = 10_000
"""Each ballast key holds one value this large: the state grows by key, not by update."""
FILL_MB_PER_S = 12.0
FILL_CHECK_S = 2.0
"""How often the fill looks at the checkpointed state's size."""
FILL_MARGIN = 1.1
"""The fill stops a tenth beyond the state asked for: the checkpoint's cleanup deletes
versions it no longer retains, and the state is measured again at the move."""
AFTER_MOVE_S = 25
NODES = ("alpha/bench-move-1", "alpha/bench-move-2")
NETWORK_PREFIX = "bench-migrate-"
PARTNER_NODE = "beta/bench-move-3"
"""The target of a ``partner`` move: another participant's node, another Kafka cluster."""


@dataclass(frozen=True)
class Migration:
    mode: str
    """``warm`` (a replica loads the state first), ``cold`` (resume from the checkpoint), or
    ``partner`` (warm, onto a node of another participant under a BPM contract)."""
    asked_mb: int
    """The checkpointed state asked for: the fill sends ballast until the state holds it."""
    state_bytes: int
    """Size of the fragment's checkpointed state (every retained version) at the move."""
    hand_over_s: float
    """From the move's request to the fragment running on the new node."""
    pause_s: float | None
    """The longest gap between results from the move's request until it was done."""
    gap_before_s: float | None
    """Median gap between results in the two minutes before the move (the slide)."""
    longest_gap_before_s: float | None
    """The longest gap in those two minutes: the pause a move cannot be told from."""
    switch_gap_s: float | None = None
    """The longest of the two gaps around the moment the new node took the output over
    (the old node's last results, the new node's first, its next)."""
    ballast_expiry: str = "scan"
    """How the ballast's windows leave its state (the aggregate's ``expiry``)."""
    batch_before_s: float | None = None
    """The median duration of the fragment's batches before the move (its node's load
    report): a result comes in the first batch after its window closes, so without any
    move the gaps between results already vary by up to one batch."""
    pause_began_s: float | None = None
    """When the longest gap began, from the move's request (negative: before it): at the
    switch, or while the replica started and caught up beside the old node."""
    done_s: float | None = None
    """When the move was done (the new node serving), from its request."""
    gap_timeline: tuple[tuple[float, float], ...] = ()
    """Each gap between results from a minute before the request to 20 s after the move
    was done: (when it ended, from the request; its length), the move's pause curve."""
    longest_gap_without_move_s: float | None = None
    """The control: the longest gap of a stretch as long as the move's, before the move
    (the median over such stretches of the two minutes before). The pause is the longest
    of many gaps; set against the median gap, it counts the output's own spread too."""

    def long_gaps(self, over_s: float = 0.5) -> list[tuple[float, float]]:
        """The gaps of ``gap_timeline`` longer than the normal gap by over ``over_s``, as
        (when they began, from the request; length)."""
        if self.gap_before_s is None:
            return []
        return [(round(end - gap, 1), gap) for end, gap in self.gap_timeline
                if gap > self.gap_before_s + over_s]

    @property
    def pause_beyond_normal_s(self) -> float | None:
        """The pause less the normal gap: what the move cost the output's readers."""
        return _beyond(self.pause_s, self.gap_before_s)

    @property
    def pause_beyond_longest_normal_s(self) -> float | None:
        """The pause less the longest gap without a move: what no normal gap reached."""
        return _beyond(self.pause_s, self.longest_gap_before_s)

    @property
    def no_move_pause_s(self) -> float | None:
        """The control's longest gap less the normal gap: what the pause's measure gives
        over a stretch as long, with no move."""
        return _beyond(self.longest_gap_without_move_s, self.gap_before_s)

    @property
    def pause_beyond_no_move_s(self) -> float | None:
        """The pause less the control's longest gap: what the move added to the output's
        own longest gap over a stretch as long."""
        return _beyond(self.pause_s, self.longest_gap_without_move_s)

    @property
    def switch_beyond_normal_s(self) -> float | None:
        return _beyond(self.switch_gap_s, self.gap_before_s)

    @property
    def state_mb(self) -> float:
        return self.state_bytes / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state_mb": round(self.state_mb, 1),
                "pause_beyond_normal_s": self.pause_beyond_normal_s,
                "pause_beyond_longest_normal_s": self.pause_beyond_longest_normal_s,
                "switch_beyond_normal_s": self.switch_beyond_normal_s,
                "no_move_pause_s": self.no_move_pause_s,
                "pause_beyond_no_move_s": self.pause_beyond_no_move_s,
                "long_gaps": self.long_gaps()}


def _beyond(gap_s: float | None, normal_s: float | None) -> float | None:
    return None if gap_s is None or normal_s is None else round(max(0.0, gap_s - normal_s), 2)


def summary(moves: list[Migration]) -> dict[str, Any]:
    """The figures ``bench.json`` keeps: the largest state moved warm and its pause."""
    warm = [m for m in moves if m.mode == "warm" and m.ballast_expiry == "scan"]
    if not warm:
        return {"largest_state_mb": None, "pause_at_largest_s": None}
    largest = max(warm, key=lambda m: m.asked_mb)
    cold = [m for m in moves if m.mode == "cold" and m.asked_mb == largest.asked_mb]
    timed = [m for m in moves if m.mode == "warm" and m.ballast_expiry == "timers"
             and m.asked_mb == largest.asked_mb]
    ratio = (round(cold[0].pause_s / largest.pause_s, 2)
             if cold and cold[0].pause_s and largest.pause_s else None)
    return {"largest_state_mb": round(largest.state_mb, 1),
            # The figure: the longest gap during the move beyond the normal one.
            "pause_at_largest_s": largest.pause_beyond_normal_s,
            "longest_gap_at_largest_s": largest.pause_s,
            "normal_gap_at_largest_s": largest.gap_before_s,
            "longest_normal_gap_at_largest_s": largest.longest_gap_before_s,
            # The bound in its own words: at most one batch beyond the normal gap.
            "batch_at_largest_s": largest.batch_before_s,
            "pause_beyond_longest_normal_at_largest_s": largest.pause_beyond_longest_normal_s,
            "switch_beyond_normal_at_largest_s": largest.switch_beyond_normal_s,
            # The control: the same measure over a stretch as long before the move.
            "no_move_pause_at_largest_s": largest.no_move_pause_s,
            "pause_beyond_no_move_at_largest_s": largest.pause_beyond_no_move_s,
            "cold_pause_at_largest_s": cold[0].pause_s if cold else None,
            "cold_over_warm_at_largest": ratio,
            "warm_pauses_s": {str(m.asked_mb): m.pause_s for m in warm},
            # The same move with the ballast's windows expiring by timers (expiry: timers).
            "pause_at_largest_timers_s": timed[0].pause_beyond_normal_s if timed else None,
            "state_mb_at_largest_timers": round(timed[0].state_mb, 1) if timed else None,
            # A warm move onto a partner's node (another cluster), as BPM makes it.
            "partner": [m.as_dict() for m in moves if m.mode == "partner"]}


def network_yaml(name: str, ballast_expiry: str = "scan") -> str:
    """The measured fragment: a sliding window per sensor, and the ballast beside it."""
    return yaml.safe_dump({
        "name": name, "participant": "alpha", "topic_prefix": f"{name}.", "partitions": 2,
        "trigger": "1 second",
        "streams": {"readings": {"topic": SENSOR_READINGS, "participant": "alpha",
                                 "schema": "sensor_reading"}},
        "boxes": {
            "checked": {"type": "filter", "params": {"predicate": "sensor_id IS NOT NULL"}},
            "steady": {"type": "filter", "params": {"predicate": "kind <> 'ballast'"}},
            "per_sensor": per_sensor_box(WINDOW_S, SLIDE_S),
            "heavy": {"type": "filter", "params": {"predicate": "kind = 'ballast'"}},
            "ballast": {
                "type": "aggregate", "key": ["sensor_id"],
                "params": {"window": {"type": "tumbling", "size": "1 day"},
                           "group_by": ["sensor_id"],
                           "aggregates": {"payload": {"last": "site"}},
                           "expiry": ballast_expiry}},
        },
        "arrows": [{"from": "readings", "to": "checked"}, {"from": "checked", "to": "steady"},
                   {"from": "steady", "to": "per_sensor"}, {"from": "checked", "to": "heavy"},
                   {"from": "heavy", "to": "ballast"}],
    }, sort_keys=False)


def per_sensor_box(window_s: int, slide_s: int) -> dict[str, Any]:
    """A sliding window per sensor, keyed by sensor: results every slide (the output whose
    gaps the benchmarks measure)."""
    return {"type": "aggregate", "key": ["sensor_id"],
            "params": {"window": {"type": "sliding", "size": f"{window_s} seconds",
                                  "slide": f"{slide_s} seconds"},
                       "group_by": ["sensor_id"],
                       "aggregates": {"readings": {"count": "value"},
                                      "total": {"sum": "value"}}}}


@dataclass
class BallastInput:
    """One round of sensor readings a second, in real time; during the fill, each round
    also carries ballast readings (a new key each, with a large value) at ``mb_per_s``."""

    config: dict[str, Any]
    registry: SchemaRegistryClient
    topic: str
    ballast_mb: int
    """At most this much ballast; less once ``enough`` is set."""
    mb_per_s: float = FILL_MB_PER_S
    enough: threading.Event = field(default_factory=threading.Event)
    filled: threading.Event = field(default_factory=threading.Event)
    sent_mb: float = 0.0
    last_fill_stime: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="ballast-input", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        try:
            self._publish()
        except BaseException as error:  # surfaced by the caller through .error
            self.error = error
            self.filled.set()

    def _publish(self) -> None:
        ensure_topics(self.config, [self.topic], partitions=2)
        rnd = random.Random(7)
        pool = base64.b64encode(rnd.randbytes(PAYLOAD_BYTES * 4)).decode()
        per_round = max(1, int(self.mb_per_s * 1e6 / PAYLOAD_BYTES))
        left = int(self.ballast_mb * 1e6 / PAYLOAD_BYTES)
        readings = sensor_readings(SENSORS, STIME_ORIGIN_MS, 1000, None)
        keys = itertools.count()
        started = time.monotonic()
        with TupleProducer(self.config, self.registry, self.topic,
                           schema_for_topic(SENSOR_READINGS), f"ballast/{self.topic}",
                           to_dict) as producer:
            for index in itertools.count():
                if self.stop.is_set():
                    break
                stime = STIME_ORIGIN_MS + index * 1000
                delay = started + index - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                for reading in itertools.islice(readings, SENSORS):
                    producer.produce(reading, reading.tuple_id, stime, key=reading.sensor_id)
                if self.enough.is_set():
                    left = 0
                for _ in range(min(per_round, left)):
                    self.sent_mb += PAYLOAD_BYTES / 1e6
                    key = next(keys)
                    start = rnd.randrange(len(pool) - PAYLOAD_BYTES)
                    heavy = SensorReading(f"b{key:08d}", "ballast", 0.0, "bytes", stime,
                                          pool[start:start + PAYLOAD_BYTES])
                    producer.produce(heavy, heavy.tuple_id, stime, key=heavy.sensor_id)
                    left -= 1
                producer.emit_boundaries(stime)
                producer.poll()
                if left == 0 and not self.filled.is_set():
                    self.last_fill_stime = stime
                    self.filled.set()
            producer.emit_boundaries(stime + 60_000)
            producer.flush(30)


def start_nodes(layout: StackLayout, catalog: CatalogClient, nodes: tuple[str, ...] = NODES
                ) -> list[processes.RunningProcess]:
    started = [start_node(layout, node) for node in nodes]
    for node in nodes:
        wait_for_node(catalog, node, timeout_s=240)
    return started


def _gaps(times_ms: list[int], within_ms: int = 500) -> list[float]:
    """Gaps between bursts of results: the writes of one batch, closer than ``within_ms``."""
    return [(b - a) / 1000 for a, b in itertools.pairwise(sorted(times_ms)) if b - a > within_ms]


def _longest_gap(times_ms: list[int], within_ms: int = 500) -> tuple[float, int] | None:
    """The longest of ``_gaps``, and when it began (the last result before it)."""
    ordered = sorted(times_ms)
    return max((((b - a) / 1000, a) for a, b in itertools.pairwise(ordered) if b - a > within_ms),
               default=None)


def _gap_timeline(times_ms: list[int], asked_ms: int, done_ms: int,
                  within_ms: int = 500) -> tuple[tuple[float, float], ...]:
    """(end, length) of each gap between result bursts from 60 s before ``asked_ms`` to 20 s
    after ``done_ms``, in seconds from ``asked_ms``."""
    shown = sorted(t for t in times_ms if asked_ms - 60_000 <= t <= done_ms + 20_000)
    return tuple((round((b - asked_ms) / 1000, 2), round((b - a) / 1000, 2))
                 for a, b in itertools.pairwise(shown) if b - a > within_ms)


def _longest_gap_without_move(times_ms: list[int], asked_ms: int, length_ms: int,
                              within_ms: int = 500, step_ms: int = 1_000) -> float | None:
    """The median, over the stretches of ``length_ms`` within the two minutes before
    ``asked_ms`` (one each ``step_ms``), of each stretch's longest gap; the whole two
    minutes' longest if a stretch is longer."""
    since = asked_ms - 120_000
    before = sorted(t for t in times_ms if since <= t < asked_ms)
    starts = range(since, asked_ms - length_ms + 1, step_ms) if length_ms < 120_000 else \
        range(since, since + 1)
    longest = []
    for start in starts:
        inside = [t for t in before if start <= t <= start + length_ms]
        gaps = _gaps(inside, within_ms)
        if gaps:
            longest.append(max(gaps))
    return round(statistics.median(longest), 2) if longest else None


def _switch_gap(times_ms: list[int], done_ms: int, within_ms: int = 500) -> float | None:
    """The longest gap between the results just before the move was done (the old node's
    last) and the two bursts after it (the new node's catch-up, or first, and next)."""
    before = [t for t in times_ms if t <= done_ms][-1:]
    after = [t for t in times_ms if t > done_ms]
    bursts = [t for i, t in enumerate(after) if i == 0 or t - after[i - 1] > within_ms][:2]
    return max(_gaps(before + bursts, within_ms), default=None) if before and bursts else None


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
            layout: StackLayout, runs: list[tuple[str, int, str]], say: Callable[[str], None],
            failed: list[str] | None = None, into: list[Migration] | None = None
            ) -> list[Migration]:
    """One move per (mode, state MB, ballast expiry), each on a network of its own. A
    move that fails is said and noted in ``failed`` (raised without it); the others
    still run, and their figures are kept (in ``into`` as each ends, if given: a run
    stopped midway keeps those it has)."""
    results = into if into is not None else []
    with CatalogClient(endpoints.catalog_url) as catalog:
        wanted = NODES + ((PARTNER_NODE,) if any(m == "partner" for m, _, _ in runs) else ())
        _clear_interrupted(endpoints, catalog, say)
        say(f"  starting nodes {', '.join(wanted)}")
        nodes = start_nodes(layout, catalog, wanted)
        try:
            for mode, state_mb, expiry in runs:
                try:
                    results.append(_one(endpoints, registry, spark, catalog, mode,
                                        state_mb, expiry, say))
                except Exception as error:
                    if failed is None:
                        raise
                    failed.append(f"{mode} {state_mb} MB ({expiry}): "
                                  f"{type(error).__name__}: {error}")
                    say(f"  {failed[-1]}")
        finally:
            for process in nodes:
                processes.stop(process)
    return results


def _clear_interrupted(endpoints: Endpoints, catalog: CatalogClient,
                       say: Callable[[str], None]) -> None:
    """Withdraws the networks of a run that was interrupted, and deletes their topics:
    this run's nodes, of the same names, would run them beside its own (gigabytes of
    ballast each)."""
    for entry in catalog.list(Kind.NETWORKS):
        participant, _, name = entry.name.partition("/")
        if participant != "alpha" or not name.startswith(NETWORK_PREFIX):
            continue
        undeploy(catalog, entry.name, report=lambda _: None)
        for cluster in ("alpha", "beta"):
            delete_topics_named(kafka_config(endpoints.bootstrap(cluster)), f"{name}.")
        say(f"  withdrew {entry.name}, left deployed by an interrupted run")


def _one(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
         catalog: CatalogClient,
         mode: str, asked_mb: int, expiry: str, say: Callable[[str], None]) -> Migration:
    name = f"{NETWORK_PREFIX}{uuid.uuid4().hex[:6]}"
    network = f"alpha/{name}"
    config = kafka_config(endpoints.bootstrap("alpha"))
    deploy(network_yaml(name, expiry), name, endpoints, registry, spark, catalog,
           dict.fromkeys(("checked", "steady", "per_sensor", "heavy", "ballast"), NODES[0]),
           report=lambda _: None)
    box = f"{network}/per_sensor"
    checkpoints: list[str] = []
    contracts: list[str] = []
    # Up to twice the state asked for: a checkpoint holds 0.8 to 1.8 times the ballast
    # (compressed changelogs; snapshots beside them), so the fill stops on the state's size.
    source = BallastInput(config, registry, f"{name}.{SENSOR_READINGS}", 2 * asked_mb)
    output = f"{name}.medusa.{name}.per_sensor"
    watch = OutputWatch(config, registry, [output]).start()
    try:
        _wait_phase(catalog, box, "running", 300)
        source.start()
        fill_started = time.monotonic()
        state = f"{resolve_fragment(catalog, box).spec['checkpoint']}/state"
        while not source.filled.wait(FILL_CHECK_S):
            if checkpoint_size(state) >= FILL_MARGIN * asked_mb * 1e6:
                source.enough.set()
        if source.error is not None:
            raise source.error
        # Moved once it has taken the whole fill in: a result of a window after the fill.
        _wait_result_after(watch, output, source.last_fill_stime, 900)
        filled_s = time.monotonic() - fill_started
        say(f"  {mode} {asked_mb} MB ({expiry}): {source.sent_mb:.0f} MB of ballast sent in "
            f"{filled_s:.0f} s")
        time.sleep(10)
        entry = resolve_fragment(catalog, box)
        checkpoints.append(entry.spec["checkpoint"])
        state_bytes = checkpoint_size(f"{entry.spec['checkpoint']}/state")
        batch_s = _median_batch_s(endpoints, registry, entry.name)
        target = NODES[1]
        if mode == "partner":
            target = PARTNER_NODE
            contract = propose(catalog, f"bench-{uuid.uuid4().hex[:6]}", origin="alpha",
                               host="beta", price=1.0, delta=0.5, movable=[network],
                               period_s=3600, by="alpha")
            accept(catalog, contract.name, by="beta")
            contracts.append(contract.name)
        asked_ms = int(time.time() * 1000)
        moved = move(catalog, box, target, timeout_s=900, report=lambda _: None,
                     warm=(mode != "cold"))
        time.sleep(AFTER_MOVE_S)
        checkpoints.append(resolve_fragment(catalog, box).spec["checkpoint"])
        written = sorted(a.appended_ms for a in watch.arrived(output))
        # The pause: the longest gap from the request until the move was done (a warm move
        # runs on the old node while its replica catches up, and hands over at its end).
        done_ms = asked_ms + int(moved.seconds * 1000)
        during = [t for t in written if t <= done_ms]
        first_after = [t for t in written if t > done_ms][:1]
        longest = _longest_gap([t for t in during if t >= asked_ms] + first_after +
                               [t for t in during if t < asked_ms][-1:])
        # The control's stretches are as long as the pause's: to the first result after.
        stretch_ms = (first_after[0] if first_after else done_ms) - asked_ms
        pause = longest[0] if longest is not None else None
        gaps = _gaps([t for t in written if asked_ms - 120_000 <= t < asked_ms])
        switch = _switch_gap(written, done_ms)
        result = Migration(mode, asked_mb, state_bytes, round(moved.seconds, 2),
                           round(pause, 2) if pause is not None else None,
                           round(statistics.median(gaps), 2) if gaps else None,
                           round(max(gaps), 2) if gaps else None,
                           round(switch, 2) if switch is not None else None, expiry,
                           batch_s, round((longest[1] - asked_ms) / 1000, 1)
                           if longest is not None else None,
                           round((done_ms - asked_ms) / 1000, 1),
                           _gap_timeline(written, asked_ms, done_ms),
                           _longest_gap_without_move(written, asked_ms, stretch_ms))
        say(f"  {mode} {asked_mb} MB ({expiry}): state {result.state_mb:7.1f} MB, hand-over "
            f"{moved.seconds:5.1f} s, output pause {pause if pause is not None else '-'} s, "
            f"beginning {result.pause_began_s} s after the request, at the switch "
            f"{result.switch_gap_s} s (without a move: median gap "
            f"{result.gap_before_s} s, longest {result.longest_gap_before_s} s; a batch "
            f"{result.batch_before_s} s)")
        long_gaps = ", ".join(f"{gap:.2f} s at {began:+.1f} s" for began, gap in
                              result.long_gaps())
        say(f"    without a move, a stretch as long: longest gap "
            f"{result.longest_gap_without_move_s} s ({result.no_move_pause_s} s beyond the "
            f"median); the move {result.pause_beyond_no_move_s} s beyond that")
        say(f"    gaps over the normal one by 0.5 s or more: {long_gaps or 'none'} "
            f"(done at {result.done_s:+.1f} s)")
        return result
    finally:
        source.stop.set()
        watch.stop()
        undeploy(catalog, network, report=lambda _: None)
        for contract_name in contracts:
            revoke(catalog, contract_name, by="alpha")
        time.sleep(3)  # the node stops the query before its checkpoint goes
        for location in checkpoints:
            delete_checkpoint(location)
        # A gigabyte of ballast in the input and again in the SUnion topic, each move: the
        # runs would fill the disk.
        for participant in ("alpha", "beta"):
            delete_topics_named(kafka_config(endpoints.bootstrap(participant)), f"{name}.")


def _median_batch_s(endpoints: Endpoints, registry: SchemaRegistryClient,
                    fragment: str) -> float | None:
    """The median duration of ``fragment``'s recent batches with input, from its node's
    newest load report; None without one."""
    for report in latest_load_reports(endpoints, registry).values():
        for load in report.get("fragments") or []:
            if load.get("fragment") == fragment:
                total = batch_phases_of(load.get("operators")).get("total")
                return round(total / 1000, 2) if total else None
    return None


def _wait_phase(catalog: CatalogClient, box: str, phase: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if resolve_fragment(catalog, box).spec.get("phase") == phase:
                return
        except Exception:  # not in the catalog yet
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{box} was not {phase} within {timeout_s:.0f}s")


def _wait_result_after(watch: OutputWatch, topic: str, stime_ms: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(int(a.value.get("window_start_ms") or 0) >= stime_ms or
               _window_start(a.tuple_id) >= stime_ms for a in watch.arrived(topic)):
            return
        time.sleep(1)
    raise TimeoutError(f"{topic}: no result after the fill within {timeout_s:.0f}s")


def _window_start(tuple_id: str) -> int:
    """The window start a result's id ends with (box/group/start)."""
    last = tuple_id.rsplit("/", 1)[-1]
    return int(last) if last.isdigit() else 0
