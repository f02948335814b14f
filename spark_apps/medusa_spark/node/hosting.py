"""Hosting: the node follows the placement in the catalog, starting what is placed on it,
keeping it going (restarts, DPC's reconciliation) and stopping what is placed elsewhere.
Moves, replicas and takeovers are its ``moves`` part; they start and watch fragments
through it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from py4j.protocol import Py4JError

from medusa.access import explained
from medusa.catalog.client import CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.errors import MedusaError
from medusa.settings import kafka_config
from medusa.sunion.config import SUnionConfig
from medusa.sunion.service import positions_before
from medusa.tracing import context_of
from medusa_spark import state_stores
from medusa_spark.checkpoints import (
    batch_offsets,
    batch_watermark_ms,
    delete_checkpoint,
    drop_uncommitted,
    forget_query_id,
    is_local,
    last_committed_batch,
    read_resume,
    rebase_source,
    source_offsets,
    sync_checkpoint,
    write_resume,
)
from medusa_spark.fragment import FragmentWiring, Instance
from medusa_spark.fragment_run import (
    REDO_SUFFIX,
    FragmentRun,
    checkpoint_location,
    is_redo_copy,
    same_definition,
    start_fragment,
)
from medusa_spark.network.fragments import Fragment, fragment_delays, fragments_of
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.node.backups import Backups
from medusa_spark.node.membership import Membership
from medusa_spark.node.moves import Moves, stop_redo
from medusa_spark.node.rehearsals import Rehearsals
from medusa_spark.node.reporting import Reporting
from medusa_spark.node.state import (
    HostedFragment,
    NodeState,
    PendingTakeover,
    caught_up,
    keep_pace,
    keeping_pace,
    may_take_back,
)
from medusa_spark.reconcile import DpcRecord, ReconcileRequired, rollback
from medusa_spark.sunion_process import SUnionProcess
from medusa_spark.wiring import NetworkTopics, fragment_wiring, network_topics

REFENCED_HOLD_S = 10.0
"""After its primary took the output back, a reader-side replica's restarted query replays
behind it (its tentative boundaries may run ahead of the output's): it serves again only
after this."""
RETIRE_IDLE_S = 5.0
"""An instance a scale step replaces stops without promising the cut once it has been
idle this long (a quiet input): no batch run or running, nothing left to read, its SUnion
at the end of its inputs."""
URGENT_POLL_S = 0.1
"""How often a node reads the catalog while it takes part in a warm move."""
SECONDARY_POLL_S = 0.25
"""How often, at least, the secondary of a node that runs fragments reads the catalog."""

CATALOG_SETTLE_S = 20.0
"""How long a network's definition may name a box that no fragment entry holds before a
node calls it an error: a deploy writes the definition first, then its new fragments'
entries (a deploy that stopped half-way shows after this)."""


class SUnionInQueryError(MedusaError, RuntimeError):
    """A fragment with its SUnion in the query asked for something only a SUnion process
    does so far (a replica's or a moved instance's own SUnion)."""


class NetworkPending(NetworkError):
    """A network's definition names boxes whose fragment entries a deploy is still
    writing; its fragments here wait (or run the plan they have) for a pass."""


FRAGMENT_ERRORS = (MedusaError, CatalogError, RuntimeError, ValueError, Py4JError,
                   KafkaException)
"""What fails one fragment (a JVM call included), not the node."""

log = logging.getLogger("medusa.node")


def fragment_of(entry: Entry) -> str:
    """The fragment's name in its network (an instance's is the fragment's it is one of)."""
    instance = entry.spec.get("instance")
    return str(instance["of"]) if instance else entry.name.rsplit("/", 1)[1]


def same_query(wiring: FragmentWiring, running: FragmentWiring) -> bool:
    """Whether ``wiring`` runs the query ``running`` does. A scale step's instance moves
    the stime it writes from while it runs (the writer follows the catalog), so that one
    field is not part of the query; nor is the fragment's ``ha`` (a redeploy that changes
    it alone starts or stops the standby replica, and the primary goes on)."""
    wiring = replace(wiring, fragment=replace(wiring.fragment, ha=running.fragment.ha))
    if wiring.instance is not None and running.instance is not None:
        wiring = replace(wiring, instance=replace(
            wiring.instance, emit_from_ms=running.instance.emit_from_ms))
    return wiring == running


def box_members(entries: list[Entry]) -> dict[str, str]:
    """Box -> the name of the fragment it runs in, from a network's fragment entries. A
    fragment a redeploy replaces beside itself counts its boxes under both definitions
    (``boxes_after``): between the new definition's write and its new instances' entries,
    a box new to the network is in no other entry, and one it removed is in no new one."""
    return {box: fragment_of(e) for e in entries
            for box in [*e.spec["boxes"], *(e.spec.get("boxes_after") or ())]}


@dataclass
class NetworkPlan:
    version: int
    plan: Plan
    topics: NetworkTopics
    fragments: dict[str, Fragment]
    delays: dict[str, int | None]
    """DPC's delay D of each fragment (``fragment_delays``), once per network version."""
    wiring: dict[str, FragmentWiring] = field(default_factory=dict)


class Hosting:
    """Follows the catalog's placement, one ``reconcile`` pass at a time."""

    def __init__(self, node: NodeState, membership: Membership, reporting: Reporting) -> None:
        self.node = node
        self._membership = membership
        self._reporting = reporting
        self.moves = Moves(node, self)
        self.urgent = False
        """A warm move, a quiet output or an active standby: the catalog is read every
        ``URGENT_POLL_S``."""
        self.backing_up = False
        """The secondary of a node that runs fragments: the catalog is read at least every
        ``SECONDARY_POLL_S``, so that a passive takeover starts soon after the failure."""
        self.backups = Backups(node.global_name)
        """The SUnions waiting here for the passive fragments this node backs up."""
        self.rehearsals = Rehearsals(node.spark, node.global_name, membership.rehearsed)
        """Their queries, each run once beside the running one (compiled before a takeover)."""
        self._plans: dict[str, NetworkPlan] = {}
        self._incomplete_since: dict[str, tuple[int, float]] = {}
        """Network -> the version of its definition that names a box in no fragment entry
        yet, and since when (``CATALOG_SETTLE_S``)."""
        self._precopied: set[str] = set()
        self._takeovers: dict[str, Callable[[], None]] = {}
        """Standby replicas to promote and fragments to take over from a failed node, at
        the end of this pass, side by side."""

    def reconcile(self) -> None:
        """One pass: start what is placed here, hand over what is placed elsewhere."""
        nodes = {n.name: n for n in self.node.catalog.list(Kind.NODES)}
        own = nodes.get(self.node.global_name)
        if own is not None and own.spec.get("status") == "failed" and \
                own.spec.get("incarnation") == self.node.incarnation:
            self._membership.rejoin(self._abandon_all)
            return
        entries = self.node.catalog.list(Kind.FRAGMENTS)
        # The secondary of a node that runs fragments takes them over when it fails.
        backed_up = {name for name, n in nodes.items()
                     if n.spec.get("secondary") == self.node.global_name}
        self.backing_up = any(e.spec["node"] in backed_up for e in entries)
        backing = {e.name: e for e in entries if e.spec["node"] in backed_up and
                   e.spec.get("ha", "passive") != "active" and
                   e.spec.get("phase") == "running" and e.name not in self.node.hosted}
        placed = {e.name: e for e in entries if e.spec["node"] == self.node.global_name}
        replicas = {e.name: e for e in entries if e.name not in placed and (
            (e.spec.get("replica") == self.node.global_name and e.spec.get("ha") == "active") or
            e.spec.get("warm_target") == self.node.global_name or
            e.spec.get("reader_replica") == self.node.global_name)}
        by_name = {e.name: e for e in entries}
        # During a warm move both nodes follow the catalog closely: the pause is theirs; so
        # does a reader-side replica whose output has gone quiet, an active standby, whose
        # promotion after its primary's failure waits for this pass, and both sides of a
        # scale step.
        self.urgent = any(by_name[n].spec.get("warm_ready") for n in self.node.hosted
                          if n in by_name) or any(
            h.output_watch.silent_s() > 1.0 for h in self.node.hosted.values()
            if h.output_watch is not None) or any(
            h.run.standby and not h.yielded and not h.reader for h in self.node.hosted.values()
        ) or any(by_name[n].spec.get("emit_until_ms") is not None
                 for n in self.node.hosted if n in by_name)
        for name in [n for n in self.node.hosted if n not in placed and n not in replicas]:
            gone = self.node.hosted[name]
            if (gone.run.standby and not gone.yielded) or gone.reader:
                self.moves.abandon(name, "its replica is no longer placed here")
            else:
                moved = by_name.get(name)
                warm = moved is not None and (
                    moved.spec.get("warm_target") == moved.spec["node"] or
                    moved.spec.get("phase") == "running")
                if warm and moved is not None and moved.spec.get("phase") == "moving" and \
                        not gone.run.fenced() and gone.run.query.isActive:
                    continue  # it writes until its warm replica takes over (fencing it)
                # The replica takes over without this node's checkpoint.
                self.moves.hand_over(name, at_once=warm, moved=moved is not None)
        wanted = {**replicas, **placed}
        networks = self._networks({entry.spec["network"] for entry in [*wanted.values(),
                                                                       *backing.values()]},
                                  entries)
        self._takeovers = {}
        retiring = []
        for name, entry in sorted(wanted.items()):
            try:
                network = networks[entry.spec["network"]]
                if isinstance(network, Exception):
                    raise network
                if name in placed and entry.spec.get("phase") in ("retiring", "retired"):
                    retiring.append(entry)
                elif name in placed and entry.spec.get("phase") == "released" and \
                        name not in self.node.hosted:
                    self._takeovers[name] = partial(self._follow, name, entry, network)
                elif name in placed:
                    self._follow(name, entry, network)
                elif entry.spec.get("reader_replica") == self.node.global_name:
                    self.moves.follow_reader(name, entry, network)
                else:
                    self.moves.follow_replica(name, entry, network)
            except NetworkPending:
                continue
            except FRAGMENT_ERRORS as error:
                self._failed(name, error)
        self._take_over_side_by_side()
        self.backups.keep(backing, partial(self._prepare_backup, networks))
        # After the takeovers: a scale step's new instances write before the old ones stop.
        for entry in retiring:
            try:
                self._retire(entry.name, entry)
            except FRAGMENT_ERRORS as error:
                self._failed(entry.name, error)

    def _prepare_backup(self, networks: dict[str, NetworkPlan | Exception], entry: Entry
                        ) -> tuple[SUnionConfig, Callable[[], SUnionProcess]]:
        """A backed-up fragment's SUnion configuration here, and its start, waiting; its
        query is rehearsed here once per wiring (see ``rehearsals``)."""
        network = networks[entry.spec["network"]]
        if isinstance(network, Exception):
            raise network
        wiring = self.wiring(network, entry.name, entry)  # makes topics: once a pass
        self.rehearsals.start(entry.name, network.plan, wiring)
        if wiring.sunion_in_query:  # its takeover's query reads the inputs itself
            raise SUnionInQueryError(f"{entry.name}: its SUnion runs in its query")
        return (self.sunion_config(wiring),
                partial(self.start_sunion, entry.name, wiring, wait_for_go=True))

    def poll_interval(self, usual_s: float) -> float:
        """How long until the next pass."""
        if self.urgent:
            return URGENT_POLL_S
        return min(usual_s, SECONDARY_POLL_S) if self.backing_up else usual_s

    def _failed(self, name: str, error: Exception) -> None:
        if self.node.errors.get(name) != str(error):
            log.error("%s: fragment %s: %s", self.node.global_name, name, error)
        self.node.errors[name] = str(error)

    def _take_over_side_by_side(self) -> None:
        """The pass's takeovers (a failed node's fragments, say) run at the same time: much
        of each is waiting on its clusters (fencing, reading back) or on Spark's planning
        of its query, not on this node's CPU."""
        takeovers, self._takeovers = self._takeovers, {}
        if not takeovers:
            return
        with ThreadPoolExecutor(len(takeovers), thread_name_prefix="takeover") as pool:
            running = {name: pool.submit(takeover) for name, takeover in takeovers.items()}
        for name, future in running.items():
            failure = future.exception()
            if isinstance(failure, FRAGMENT_ERRORS):
                self._failed(name, failure)
            elif failure is not None:
                raise failure

    def _networks(self, names: set[str], entries: list[Entry]
                  ) -> dict[str, NetworkPlan | Exception]:
        """The plans of the networks ``names``, each read once a pass (one that cannot be
        read fails its fragments alone); the plans of the others are dropped (a network
        withdrawn, or no longer placed here, would otherwise stay in memory for good)."""
        networks: dict[str, NetworkPlan | Exception] = {}
        for network_name in names:
            try:
                members = [e for e in entries if e.spec["network"] == network_name]
                networks[network_name] = self._network(network_name, members)
            except (MedusaError, CatalogError, RuntimeError, ValueError) as error:
                networks[network_name] = error
        for gone in set(self._plans) - set(networks):
            del self._plans[gone]
        for gone in set(self._incomplete_since) - set(networks):
            del self._incomplete_since[gone]
        return networks

    def _network(self, network_name: str, members: list[Entry]) -> NetworkPlan:
        entry = self.node.catalog.get(Kind.NETWORKS, network_name)
        if entry is None:
            raise NetworkError(f"network {network_name} is not in the catalog")
        member = box_members(members)
        cached = self._plans.get(network_name)
        # Validating plans every box's query in Spark: a pass (every 0.1 s for a standby
        # awaiting promotion) must not pay for it while the network and its fragments stay.
        if cached is not None and cached.version == entry.version:
            had = {b: name for name, f in cached.fragments.items() for b in f.boxes}
            if had == {b: member.get(b) for b in had}:
                return cached
        spec = parse_network(entry.spec["definition"], origin=f"network {network_name}")
        plan = validate(spec, self.node.spark)
        missing = [box for box in plan.order if box not in member]
        if missing:
            version, since = self._incomplete_since.get(network_name, (None, 0.0))
            if version != entry.version:
                since = time.monotonic()
                self._incomplete_since[network_name] = (entry.version, since)
            if time.monotonic() - since < CATALOG_SETTLE_S:
                if cached is not None:
                    return cached  # the deploy's next writes complete it
                raise NetworkPending(f"network {network_name}: box {missing[0]!r} is in no "
                                     "fragment of the catalog yet")
            raise NetworkError(f"network {network_name}: box {missing[0]!r} is in no fragment "
                               "of the catalog; redeploy the network")
        self._incomplete_since.pop(network_name, None)
        fragments = fragments_of(plan, {b: f for b, f in member.items() if b in plan.boxes})
        # Topics and schemas exist since the deploy; this only looks them up.
        topics = network_topics(plan, fragments, self.node.endpoints, self.node.registry,
                                announce=False)
        self._plans[network_name] = NetworkPlan(entry.version, plan, topics, fragments,
                                                fragment_delays(plan, fragments))
        return self._plans[network_name]

    def kept_through_redeploy(self, hosted: HostedFragment, network: NetworkPlan,
                              entry: Entry, bootstrap: str | None = None) -> bool:
        """Whether ``hosted`` runs ``network``'s version: it did, or the redeploy left its
        query as it was (the same boxes, inputs, outputs, topics and delay), and it goes
        on without a stop: only a changed fragment is restarted."""
        if hosted.network_version == network.version:
            return True
        try:
            unchanged = same_query(self.wiring(network, hosted.name, entry, bootstrap),
                                   hosted.run.wiring)
        except NetworkError:
            return False
        if unchanged:
            hosted.network_version = network.version
            log.info("%s: %s: the network was redeployed, this fragment is unchanged; it "
                     "keeps running", self.node.global_name, hosted.name)
        elif entry.spec.get("replaced"):
            # A redeploy replaces it beside itself (``deploy --make-before-break``): it runs
            # the definition it has until the new one's instances take over.
            if not hosted.replaced:
                hosted.replaced = True
                log.info("%s: %s: redeployed with a new definition; it keeps writing until "
                         "the new definition's instances take over", self.node.global_name,
                         hosted.name)
            return True
        return unchanged

    def wiring(self, network: NetworkPlan, name: str, entry: Entry,
               bootstrap: str | None = None) -> FragmentWiring:
        short = fragment_of(entry)
        fragment = network.fragments.get(short)
        if fragment is None:
            raise NetworkError(f"network {entry.spec['network']} has no fragment {short!r}")
        spec = entry.spec.get("instance")
        instance = None if spec is None else Instance(
            spec["index"], spec["count"], spec["generation"], tuple(spec["key"]),
            spec["emit_from_ms"], {name: {int(p): o for p, o in offsets.items()}
                                   for name, offsets in spec["start_positions"].items()},
            bool(spec.get("by_partition")))
        return fragment_wiring(network.topics, entry.spec["network"], fragment,
                               bootstrap or self.node.bootstrap, network.delays[short], instance)

    def _follow(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        hosted = self.node.hosted.get(name)
        if hosted is not None and hosted.reader:
            self.moves.abandon(name, "placed here; its reader-side replica gives way to it")
            hosted = None
        warm = entry.spec.get("warm_target") == self.node.global_name
        if entry.spec.get("phase") == "warming":
            self._warm_instance(name, entry, network)
            return
        if hosted is not None and hosted.run.standby and not hosted.yielded:
            if entry.spec.get("phase") != "moving" or warm:
                # A warm replica takes over without a stop: its SUnion, then its outputs
                # fence the old node's, which stops when it sees that (make before break).
                if warm and not self.moves.ready_to_take_over(hosted):
                    return
                self._takeovers[name] = partial(self.moves.promote, name, entry, hosted, warm)
                return
            # Moved here while its primary runs: the move restores it from that checkpoint.
            self.moves.abandon(name, "moved here; resuming from the primary's checkpoint instead")
            hosted = None
        if hosted is not None:
            if not self.kept_through_redeploy(hosted, network, entry):
                self.moves.hand_over(name, keep_placement=True)  # runs the new definition
                hosted = None
            else:
                self._apply_cut(hosted, entry)
                hosted.run.writer.promise_hold_ms = entry.spec.get("promise_hold_ms")
                start = (entry.spec.get("instance") or {}).get("emit_from_ms")
                if start is not None and not hosted.run.standby and \
                        start < (hosted.run.writer.emit_from_ms or start):
                    # A scale step's old instance stopped short of the cut (quiet input).
                    hosted.run.writer.emit_from_ms = start
                self.watch(hosted, entry, network)
                return
        if entry.spec.get("phase") == "failed":
            return  # restarted too often; waits for a redeploy, a move or a takeover
        phase = entry.spec.get("phase", "placed")
        wiring = self.wiring(network, name, entry)
        mine = checkpoint_location(self.node.checkpoint_root, wiring)
        source = entry.spec.get("checkpoint")
        if source and not same_definition(source, mine):
            log.info("%s: %s was redeployed with another definition or other topics; it "
                     "starts afresh rather than from %s", self.node.global_name, name, source)
            source = None
        if source and (not is_local(source) or is_redo_copy(source, mine)):
            # On a shared store, or where a redo on this node left it: resumed in place.
            mine = source
        if phase == "moving":
            # The old node still runs it: copy the bulk of its state ahead of the hand-over.
            if source and name not in self._precopied:
                stats = sync_checkpoint(source, mine)
                self._precopied.add(name)
                log.info("%s: %s: copied %s ahead of the hand-over",
                         self.node.global_name, name, stats)
            return
        failover = context_of(entry.spec.get("takeover_trace")) if phase == "released" else None
        takeover = (self.node.tracer.start_span(f"takeover {name}", context=failover, attributes={
            "medusa.fragment": name, "medusa.node": self.node.global_name, "medusa.ha": "passive",
            "medusa.failed_node": entry.spec.get("released_by") or ""})
            if failover is not None else None)
        # The inputs first: the SUnion's positions are in its own topic, not in the
        # checkpoint, so it opens while the checkpoint is copied (one from another cluster
        # is rebased on the copy, and waits for it).
        before = str(entry.spec.get("released_by") or "").split("/")[0]
        rebased = bool(source and before and
                       self.node.endpoints.bootstrap(before) != self.node.bootstrap)
        # With the SUnion in the query its positions are in the checkpoint: nothing to open
        # or rebase (the offsets name the inputs' own clusters, not this node's).
        in_query = wiring.sunion_in_query
        sunion = None if rebased or in_query else self._sunion_for_takeover(name, wiring)
        if source and source != mine:
            stats = sync_checkpoint(source, mine)
            log.info("%s: %s: copied %s more of its checkpoint",
                     self.node.global_name, name, stats)
        elif source and not is_local(source):
            log.info("%s: %s resumes in place from its checkpoint on the shared store %s",
                     self.node.global_name, name, source)
        if takeover is not None:
            restored = last_committed_batch(mine)
            takeover.set_attributes({
                "medusa.checkpoint.batch_restored": -1 if restored is None else restored,
                "medusa.checkpoint.offsets_replayed_from":
                    (batch_offsets(mine, restored) if restored is not None else None) or
                    "the earliest offsets"})
        if sunion is None and not in_query:
            resume = self.rebase(name, mine, wiring, self.node.endpoints.bootstrap(before))
            sunion = self.start_sunion(name, wiring, resume)
        drop_uncommitted(mine)  # a batch begun after the hand-over: planned anew here
        run = start_fragment(self.node.spark, network.plan, wiring, mine)
        pending = None
        if takeover is not None:
            pending = PendingTakeover(takeover, time.time_ns())
            self.moves.trace_first_output(run, pending)
        with self.node.lock:
            self.node.hosted[name] = HostedFragment(name, network.version, run, time.time(),
                                                    sunion, takeover=pending)
        self._precopied.discard(name)
        log.info("%s: running %s (%s)%s", self.node.global_name, name,
                 ", ".join(wiring.fragment.boxes),
                 f", taken over from {entry.spec.get('released_by')}" if takeover else "")
        self.mark_running(name, mine)

    def _warm_instance(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        """A scale step's new instance, before it takes over: its SUnion reads the inputs
        from where the step says, its query rebuilds the state as a standby (writing
        nothing), and ``warm_ready`` tells ``medusa scale`` once it has caught up."""
        hosted = self.node.hosted.get(name)
        if hosted is None:
            wiring = self.wiring(network, name, entry)
            mine = checkpoint_location(self.node.checkpoint_root, wiring)
            sunion = self.start_sunion(name, wiring, rebuilding=True)
            run = start_fragment(self.node.spark, network.plan, wiring, mine, standby=True)
            with self.node.lock:
                self.node.hosted[name] = HostedFragment(name, network.version, run, time.time(),
                                                        sunion, warming=True)
            log.info("%s: rebuilding the state of %s beside the instances it replaces",
                     self.node.global_name, name)
            return
        self.watch(hosted, entry, network)
        if not entry.spec.get("warm_ready") and hosted.run.writer.batches > 0 and \
                caught_up(hosted.run) and keeping_pace(hosted):
            def ready(spec: dict[str, Any] | None) -> dict[str, Any] | None:
                if spec is None or spec.get("node") != self.node.global_name or \
                        spec.get("phase") != "warming":
                    return None
                return {**spec, "warm_ready": True}
            keep_pace(hosted)
            self.node.catalog.update(Kind.FRAGMENTS, name, ready)
            log.info("%s: %s has caught up with its input; ready to take over",
                     self.node.global_name, name)

    def _apply_cut(self, hosted: HostedFragment, entry: Entry) -> None:
        """A scale step's switch on an instance it replaces (``emit_until_ms``): the writer
        stops writing results from the cut on, and the cut goes back to the catalog. A
        cut is never lowered: results below it may be written already."""
        wanted = entry.spec.get("emit_until_ms")
        writer = hosted.run.writer
        if wanted is None:
            if writer.emit_until_ms is not None:
                writer.cut(None)  # the step was given up
            return
        floor = max(int(wanted), int(entry.spec.get("emit_cut_ms") or wanted),
                    writer.emit_until_ms or int(wanted))
        if writer.emit_until_ms == floor and entry.spec.get("emit_cut_ms") == floor:
            return
        cut = writer.cut(floor)

        def answered(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.node.global_name or \
                    spec.get("emit_until_ms") != wanted:
                return None
            return {**spec, "emit_cut_ms": cut}
        self.node.catalog.update(Kind.FRAGMENTS, hosted.name, answered)
        log.info("%s: %s writes no result from stime %s on: a scale step's new instances do",
                 self.node.global_name, hosted.name, cut)

    def _retire(self, name: str, entry: Entry) -> None:
        """A scale step replaces this fragment (or instance): once its outputs have
        promised the step's cut (its results below it are out), stops it at a batch
        boundary and records how far its results go (see ``scaling``)."""
        if entry.spec.get("phase") == "retired":
            return
        hosted = self.node.hosted.get(name)
        checkpoint = entry.spec.get("checkpoint")
        topic = None
        written_below: int | None = None
        if hosted is not None and entry.spec.get("emit_until_ms") is not None and \
                not hosted.run.standby:
            self._apply_cut(hosted, entry)
            writer = hosted.run.writer
            now = time.monotonic()
            # Quiet means idle, not slow: a batch that runs longer than RETIRE_IDLE_S, or an
            # SUnion behind its inputs (a loaded machine), must finish first, or the new
            # instances, which dropped their results below the cut, would lose those.
            if hosted.retiring_since is None or hosted.retiring_batches != writer.batches \
                    or hosted.run.has_work() or not (
                        hosted.sunion is None or hosted.sunion.caught_up(0)):
                hosted.retiring_since, hosted.retiring_batches = now, writer.batches
            if writer.wrote_all_before_cut():
                written_below = writer.emit_until_ms
            elif hosted.run.query.isActive and now - hosted.retiring_since < RETIRE_IDLE_S:
                return
            else:
                # A quiet input: its results are written below what its outputs promised;
                # the new instances write the rest (``scaling`` lowers their start to it).
                written_below = writer.written_below_ms()
                log.info("%s: %s was idle for %.0fs before the scale step's cut %s; it "
                         "stops with its results written below %s", self.node.global_name,
                         name, RETIRE_IDLE_S, writer.emit_until_ms, written_below)
        if hosted is not None:
            checkpoint, topic = hosted.run.checkpoint, hosted.run.wiring.source.topic
            self.moves.hand_over(name, keep_placement=True)
        batch = last_committed_batch(checkpoint) if checkpoint else None
        watermark = batch_watermark_ms(checkpoint, batch) if checkpoint and batch is not None \
            else None
        if written_below is not None:
            watermark = written_below

        def retired(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.node.global_name or \
                    spec.get("phase") != "retiring":
                return None
            return {**spec, "phase": "retired", "checkpoint": checkpoint,
                    "retired_watermark_ms": watermark, "sunion_topic": topic}
        self.node.catalog.update(Kind.FRAGMENTS, name, retired)
        log.info("%s: retired %s for a scale step: results written below stime %s",
                 self.node.global_name, name, watermark)

    def rebase(self, name: str, checkpoint: str, wiring: FragmentWiring,
               old_bootstrap: str) -> dict[str, Any] | None:
        """Moved here from another cluster (or warming up here for such a move): the query
        goes on at the end of this cluster's SUnion topic, and the SUnion from the inputs'
        positions of the last batch the query committed there."""
        batch = last_committed_batch(checkpoint)
        topic = wiring.source.topic
        read = source_offsets(checkpoint, batch, topic) if batch is not None else None
        if batch is None or read is None:
            return None
        positions = positions_before(old_bootstrap, topic, read)
        if positions is None:
            # Nothing read there since it came (moved away again before committing a batch
            # on that cluster): it resumes where it resumed there.
            positions = read_resume(checkpoint, batch)
        if positions is not None:
            write_resume(checkpoint, batch, positions)
        consumer = Consumer(kafka_config(self.node.bootstrap, **{"group.id": f"medusa.{name}"}))
        try:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in read}
        finally:
            consumer.close()
        rebase_source(checkpoint, topic, ends)
        log.info("%s: %s comes from another cluster: batch %d rebased to %s, inputs resume "
                 "from the positions read there", self.node.global_name, name, batch, ends)
        return positions

    def start_sunion(self, name: str, wiring: FragmentWiring,
                     resume: dict[str, Any] | None = None, wait_for_go: bool = False,
                     rebuilding: bool = False) -> SUnionProcess:
        """The fragment's SUnion, started (``rebuilding``: for a fragment that rebuilds its
        state beside a serving instance, niced from its start; see ``Node``)."""
        if wiring.sunion_in_query:
            raise SUnionInQueryError(
                f"fragment {name}: its SUnion runs in its query (sunion: in-query); moves, "
                "scale steps and replicas of such a fragment are not supported yet")
        config = self.sunion_config(wiring, resume)
        folder = self.node.work_dir / "sunion" / f"{wiring.topic_prefix}{name}".replace("/", "_")
        return SUnionProcess(config, folder).start(wait_for_go, rebuilding)

    def sunion_config(self, wiring: FragmentWiring,
                      resume: dict[str, Any] | None = None) -> SUnionConfig:
        """The fragment's SUnion as this node runs it (its traces to this node's collector)."""
        return wiring.sunion_config(resume, self.node.endpoints.otlp_endpoint or None)

    def _sunion_for_takeover(self, name: str, wiring: FragmentWiring) -> SUnionProcess:
        """The fragment's SUnion, started: the one waiting here if this node backs it up
        (it goes at once), or a new one."""
        waiting = self.backups.take(name, self.sunion_config(wiring))
        if waiting is None:
            return self.start_sunion(name, wiring)
        waiting.go()
        log.info("%s: %s: its waiting SUnion goes", self.node.global_name, name)
        return waiting

    def watch(self, hosted: HostedFragment, entry: Entry, network: NetworkPlan) -> None:
        """Keeps a hosted fragment going: its SUnion alive, its failed query restarted."""
        if hosted.failed:
            return
        pending = hosted.takeover
        if pending is not None and pending.ended.is_set() and not pending.reported:
            pending.reported = self.moves.report_first_batches(hosted)
        if hosted.sunion is not None:
            if hosted.sunion.fenced():
                self._restart_fenced_sunion(hosted)
            else:
                hosted.sunion.keep_alive()
        if hosted.run.fenced():
            if hosted.reader:
                self._restart_query(hosted, network, "the primary writes its output again",
                                    standby=True)
                self.moves.set_serving(hosted.name, None)
                hosted.serve_after = time.monotonic() + REFENCED_HOLD_S
            elif entry.spec.get("reader_replica"):
                # Its reader-side replica serves: it catches up beside it, writing nothing,
                # and takes the output back once stable (make before break).
                hosted.yielded = True
                self._restart_query(hosted, network, "as a standby while its reader-side "
                                    f"replica on {entry.spec['reader_replica']} serves",
                                    standby=True)
            else:
                self.moves.abandon(hosted.name, "another node writes its outputs")
            return
        # After the fencing above: a primary fenced by its reader-side replica yields first.
        if not hosted.reader:
            self._reporting.publish_dpc_state(hosted, bool(entry.spec.get("serving")))
        request = hosted.run.reconcile_requested()
        if request is not None:
            self._reconcile(hosted, network, request)
            return
        # A standby's writer raises the REDO it recorded (it reconciles in place, above, once
        # its query has stopped): no redo beside it.
        if hosted.run.writer.redo_requested is not None and not hosted.run.standby and \
                self._redo_beside(hosted, network):
            return
        failure = hosted.run.failure()
        if failure is None:
            if hosted.yielded and may_take_back(hosted):
                self.moves.take_back(hosted)
            return
        now = time.monotonic()
        if hosted.restart_at is None:
            hosted.restarts += 1
            if hosted.restarts > self.node.max_restarts:
                hosted.failed = True
                log.error("%s: %s failed %d times; giving up until it is redeployed or "
                          "moved: %s", self.node.global_name, hosted.name, hosted.restarts, failure)
                if hosted.sunion is not None:
                    hosted.sunion.stop()
                self._record_failure(hosted.name, failure, hosted.restarts, "failed")
                return
            delay = min(60.0, 2.0 ** (hosted.restarts - 1))
            hosted.restart_at = now + delay
            log.warning("%s: %s failed (restart %d of %d in %.0fs): %s", self.node.global_name,
                        hosted.name, hosted.restarts, self.node.max_restarts, delay, failure)
            self._record_failure(hosted.name, failure, hosted.restarts, None)
            return
        if now < hosted.restart_at:
            return
        hosted.restart_at = None
        if hosted.reader:
            self.moves.set_serving(hosted.name, None)
        # A reader-side replica restarts as a standby: it serves again if the output is
        # still quiet.
        self._restart_query(hosted, network, "after its failure",
                            standby=hosted.reader or hosted.yielded or hosted.warming)

    def _restart_query(self, hosted: HostedFragment, network: NetworkPlan, why: str,
                       standby: bool = False) -> None:
        """Starts the fragment's query again from its checkpoint."""
        if hosted.run.relay is not None:  # a real-time query whose relay failed runs on
            hosted.run.abandon()
        else:
            hosted.run.writer.close()
        wiring, rebuild = hosted.run.wiring, hosted.run.writer.rebuild
        hosted.run = start_fragment(self.node.spark, network.plan, wiring, hosted.run.checkpoint,
                                    standby=standby, rebuild=rebuild)
        if hosted.takeover is not None and not hosted.takeover.ended.is_set():
            # The takeover's first output comes from this query now.
            self.moves.trace_first_output(hosted.run, hosted.takeover)
        log.info("%s: restarted %s from its checkpoint, %s", self.node.global_name, hosted.name,
                 why)

    def _reconcile(self, hosted: HostedFragment, network: NetworkPlan,
                   request: ReconcileRequired) -> None:
        """DPC's checkpoint/redo: back to the batch before the UP_FAILURE period, then the
        query redoes the corrected input (see ``reconcile``)."""
        # A query redoing beside it is superseded: the fragment itself goes back and redoes.
        self._drop_redo(hosted, "the fragment reconciles in place")
        run = hosted.run
        run.writer.close()
        # Its pending state snapshots are written now, so that the roll-back removes them.
        state_stores.release(self.node.spark, run.checkpoint, str(run.query.runId))
        # A serving reader-side replica writes the corrections; a standby stays one.
        hosted.run, to_batch, deleted = self._roll_back_and_start(
            hosted, network, run.checkpoint, request, standby=run.standby)
        hosted.reconciliations += 1
        log.info("%s: %s reconciles UP_FAILURE period %d: checkpoint back to batch %d "
                 "(%d files dropped), redoing", self.node.global_name, hosted.name, request.epoch,
                 to_batch, deleted)

    def _roll_back_and_start(self, hosted: HostedFragment, network: NetworkPlan,
                             checkpoint: str, request: ReconcileRequired, standby: bool,
                             role: str | None = None) -> tuple[FragmentRun, int, int]:
        """Rolls ``checkpoint`` back to the batch before the UP_FAILURE period, records the
        period as redone beside it, and starts the fragment's query from it; returns the
        query, the batch gone back to and the files dropped."""
        record = DpcRecord.load(checkpoint)
        since = record.tentative_since_batch
        last = last_committed_batch(checkpoint)
        to_batch = (since - 1) if since is not None else (last if last is not None else -1)
        attributes: dict[str, str | int] = {
            "medusa.fragment": hosted.name, "medusa.node": self.node.global_name,
            "medusa.dpc.epoch": request.epoch, "medusa.checkpoint.rolled_back_to": to_batch,
            "medusa.checkpoint.last_committed": -1 if last is None else last}
        if role is not None:
            attributes["medusa.dpc.beside"] = 1
        # A stage of the failure's trace, which the SUnion's REDO named.
        with self.node.tracer.start_as_current_span(
                f"reconcile {hosted.name}", attributes=attributes,
                context=context_of(record.redo_traceparent)):
            deleted = rollback(checkpoint, to_batch)
            record.skip_epoch = max(record.skip_epoch, request.epoch)
            record.tentative_since_batch = None
            record.rolled_back_batches = (last - to_batch) if last is not None else 0
            record.save(checkpoint)
            run = start_fragment(self.node.spark, network.plan, hosted.run.wiring, checkpoint,
                                 standby=standby, role=role)
        return run, to_batch, deleted

    def _redo_beside(self, hosted: HostedFragment, network: NetworkPlan) -> bool:
        """DPC's reconciliation without a stop: a query that redoes the UP_FAILURE period
        runs beside the fragment's, which writes on (tentative), and takes the output over
        once it has written REC_DONE into its buffer and caught up with the input: the
        outputs get UNDO, the corrections, REC_DONE and what came since, at once. Returns
        whether the fragment's query is left to this (a failure of it is not restarted)."""
        request = hosted.run.writer.redo_requested
        assert request is not None
        redo = hosted.redo
        if redo is not None and redo.writer.dpc.skip_epoch < request.epoch:
            self._drop_redo(hosted, "a newer UP_FAILURE period was redone")
            redo = None
        if redo is None:
            hosted.redo = self._start_redo(hosted, network, request)
            return True
        failure = redo.failure()
        if failure is not None or redo.reconcile_requested() is not None:
            # It cannot redo beside: the fragment stops and reconciles in place, as before.
            self._drop_redo(hosted, f"it failed: {failure or 'a newer REDO'}")
            hosted.run.abandon()
            self._reconcile(hosted, network, request)
            return True
        old_stopped = not hosted.run.query.isActive
        corrected = redo.writer.dpc.rec_done_epoch >= request.epoch
        if old_stopped or (corrected and caught_up(redo)):
            self._switch_to_redo(hosted, request)
        elif corrected:
            # What is left is the input that came meanwhile: at a rebuild's priority, on
            # a machine kept busy by the queries serving, it might never close that gap.
            redo.catch_up()
        return True

    def _start_redo(self, hosted: HostedFragment, network: NetworkPlan,
                    request: ReconcileRequired) -> FragmentRun:
        run = hosted.run
        copy = checkpoint_location(self.node.checkpoint_root, run.wiring) + \
            f"{REDO_SUFFIX}{request.epoch}"
        delete_checkpoint(copy)
        stats = sync_checkpoint(run.checkpoint, copy)
        drop_uncommitted(copy)  # copied while it ran: the batch in progress is replanned
        # A query of its own: Spark would stop a running query whose id it resumes.
        forget_query_id(copy)
        redo, to_batch, deleted = self._roll_back_and_start(
            hosted, network, copy, request, standby=True, role=f"redo-{request.epoch}")
        log.info("%s: %s reconciles UP_FAILURE period %d beside its query, which writes on: "
                 "a copy of its checkpoint (%d bytes) back to batch %d (%d files dropped), "
                 "redoing", self.node.global_name, hosted.name, request.epoch, stats.bytes,
                 to_batch, deleted)
        return redo

    def _switch_to_redo(self, hosted: HostedFragment, request: ReconcileRequired) -> None:
        redo, old = hosted.redo, hosted.run
        assert redo is not None
        started = time.monotonic()
        written = redo.promote()  # fences the old query's outputs (the same writer id)
        hosted.run, hosted.redo = redo, None
        old.abandon()
        hosted.reconciliations += 1
        self.mark_running(hosted.name, redo.checkpoint)
        if old.checkpoint != redo.checkpoint:
            delete_checkpoint(old.checkpoint)
        log.info("%s: %s: the query that redid UP_FAILURE period %d took the output over in "
                 "%.2fs (UNDO, %d corrections and results, REC_DONE)", self.node.global_name,
                 hosted.name, request.epoch, time.monotonic() - started, written)

    def _drop_redo(self, hosted: HostedFragment, why: str) -> None:
        if stop_redo(hosted):
            log.warning("%s: %s: stopped the query redoing beside it: %s",
                        self.node.global_name, hosted.name, why)

    def _record_failure(self, name: str, error: str, restarts: int, phase: str | None) -> None:
        def failed(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.node.global_name:
                return None
            return {**spec, "error": explained(error, self.node.participant)[:4000],
                    "restarts": restarts,
                    **({"phase": phase} if phase else {})}
        self.node.catalog.update(Kind.FRAGMENTS, name, failed)

    def _restart_fenced_sunion(self, hosted: HostedFragment) -> None:
        """Another node's SUnion took this one's topic over: the fragment has moved on,
        unless the catalog, read again now, still places it here (the other node acted on
        an older placement); then this node's SUnion takes the topic back."""
        entry = self.node.catalog.get(Kind.FRAGMENTS, hosted.name)
        me = self.node.global_name
        if entry is None or me not in (entry.spec["node"], entry.spec.get("reader_replica")) \
                or entry.spec.get("phase") == "moving":
            return  # the next pass hands it over
        assert hosted.sunion is not None
        log.warning("%s: the SUnion of %s was fenced by another node's, but the fragment is "
                    "still placed here: starting it again", me, hosted.name)
        hosted.sunion.start()

    def mark_running(self, name: str, checkpoint: str) -> None:
        def running(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.node.global_name:
                return None  # moved on meanwhile; the next pass hands it over
            return {**spec, "phase": "running", "checkpoint": checkpoint, "released_by": None,
                    "takeover_trace": None, "error": None, "restarts": 0,
                    "warm_target": None, "warm_ready": False}
        self.node.catalog.update(Kind.FRAGMENTS, name, running)


    def _abandon_all(self) -> None:
        """Declared failed: every fragment stops without writing; networks are read anew."""
        for name in list(self.node.hosted):
            self.moves.abandon(name, "this node was declared failed")
        self.backups.stop()
        self._plans.clear()
