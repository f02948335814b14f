"""DPC's checkpoint/redo: a query that goes back to the batch before the fragment's first
tentative input and redoes the corrected input, skipping the tentative records, beside
the fragment's query, which writes on until the redo takes its output over.

The fragment's SUnion asks for it: its REDO release carries ``medusa.redo: <epoch>`` on
its records (the REC_REQUEST on its BOUNDARY records). A query that is not redoing that
period never reads the REDO's tuples (``streams.without_redone``); its writer, on seeing
the REDO's boundaries, records the request (``FragmentWriter.redo_requested``) and
writes on, tentative. The node then (``node.hosting``)

1. copies the checkpoint and rolls the copy back to the batch before the first one that
   read a record of the UP_FAILURE period (``DpcRecord.tentative_since_batch``): later
   offsets, commits and state versions are deleted, so Spark replans from there with
   the state it had;
2. records in the copy that the period's epoch is corrected (``skip_epoch``): a query
   started from it leaves out every source record marked with that epoch or an older
   one, so it reads the stable buckets it had, then the REDO's corrected ones;
3. starts that query as a standby beside the fragment's. Its writer keeps UNDO on every
   output first, the corrected results as they come, and REC_DONE after the batch that
   holds the REDO's boundaries; once it has come to REC_DONE and caught up with the
   input, it is promoted: it fences the first query's outputs and writes what it kept,
   and the first query stops.

A standby replica (which writes nothing) reconciles in place instead: its writer raises
``ReconcileRequired``, and the node rolls its own checkpoint back and restarts it (after
writing the stopped query's pending state snapshots, ``state_stores.release``, so that
none of an undone batch lands after the roll-back). So does a fragment whose redoing
query failed.

The REDO's boundaries carry the SUnion's trace of the period (``redo_traceparent``): the
node's ``reconcile`` span and the writer's ``REC_DONE`` span join it.

The record lives beside the checkpoint (``medusa-dpc.json``) and moves with it, so a node
that takes the fragment over in the middle of a failure or a reconciliation goes on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from medusa.errors import MedusaError
from medusa_spark import checkpoint_store as store
from medusa_spark.state_stores import STATE_FILE

RECORD_FILE = "medusa-dpc.json"


class ReconcileRequired(MedusaError, RuntimeError):
    """The SUnion has redone an UP_FAILURE period: the query must go back and redo it."""

    def __init__(self, fragment: str, epoch: int, batch_id: int) -> None:
        super().__init__(f"fragment {fragment}: its SUnion redid UP_FAILURE period {epoch} "
                         f"(seen in batch {batch_id}); reconciling from the checkpoint")
        self.epoch = epoch


class RollbackError(MedusaError, RuntimeError):
    """The checkpoint no longer holds the batch to go back to."""


@dataclass
class DpcRecord:
    """A fragment query's DPC progress, kept beside its checkpoint."""

    tentative_since_batch: int | None = None
    """The first batch that read a record of the current UP_FAILURE period."""
    tentative_epoch: int = 0
    skip_epoch: int = 0
    """Records of this UP_FAILURE period and older ones are left out (redone)."""
    rec_done_epoch: int = 0
    """The last period whose REC_DONE the outputs carry."""
    redo_through: int | None = None
    """The stime the REDO re-released through: REC_DONE waits until every output has
    promised as much (its corrections are all out)."""
    redo_traceparent: str | None = None
    """The W3C traceparent the REDO being redone carries: its period's trace."""
    rolled_back_batches: int | None = None
    """How many committed batches the roll-back for that REDO dropped."""

    @property
    def reconciling(self) -> bool:
        """Rolled back for a REDO whose REC_DONE is not written yet."""
        return self.skip_epoch > self.rec_done_epoch

    def read_batch(self, batch_id: int, epoch: int | None) -> bool:
        """A batch that read records of UP_FAILURE period ``epoch`` (None: no tentative
        record): the first such batch of a period not yet redone starts the tentative
        results. Returns whether the record changed."""
        if epoch is None or epoch <= max(self.skip_epoch, self.tentative_epoch):
            return False
        if self.tentative_since_batch is None:
            self.tentative_since_batch = batch_id
        self.tentative_epoch = epoch
        return True

    def tentative_in(self, batch_id: int) -> int | None:
        """The period whose results ``batch_id`` writes TENTATIVE, or None: stable."""
        if self.tentative_since_batch is not None and batch_id >= self.tentative_since_batch:
            return self.tentative_epoch
        return None

    def rec_done(self) -> None:
        """REC_DONE of the period redone is written."""
        self.rec_done_epoch = self.skip_epoch
        self.redo_through = None
        self.redo_traceparent = None
        self.rolled_back_batches = None
        # A newer period read while redoing (a failure during stabilization) keeps its first
        # batch: the redo's results since then were tentative too, and its own roll-back
        # must go back that far.
        if self.tentative_epoch <= self.skip_epoch:
            self.tentative_since_batch = None

    @classmethod
    def load(cls, checkpoint: str) -> DpcRecord:
        try:
            return cls(**json.loads(store.read_text(f"{checkpoint}/{RECORD_FILE}")))
        except FileNotFoundError:
            return cls()

    def save(self, checkpoint: str) -> None:
        store.write_text(f"{checkpoint}/{RECORD_FILE}", json.dumps(asdict(self)))


def rollback(checkpoint: str, to_batch: int) -> int:
    """Makes the checkpoint end at ``to_batch`` (-1: before the first batch): later
    offsets, commits and state versions go. Returns the files deleted."""
    if to_batch >= 0 and not store.exists(f"{checkpoint}/commits/{to_batch}"):
        raise RollbackError(f"checkpoint {checkpoint} no longer holds batch {to_batch} "
                            "(raise spark.sql.streaming.minBatchesToRetain)")
    deleted = 0
    for folder in ("offsets", "commits"):
        for name in store.list_names(f"{checkpoint}/{folder}"):
            batch = _batch_of(name)
            if batch is not None and batch > to_batch:
                store.delete(f"{checkpoint}/{folder}/{name}")
                deleted += 1
    # State version v is the state after batch v - 1. Back before the first batch, Spark
    # wants no state folder at all (it refuses a non-empty one on batch 0).
    state = f"{checkpoint}/state"
    files = store.list_files(state)
    if files and to_batch < 0:
        store.delete(state)
        return deleted + len(files)
    for relative in files:
        match = STATE_FILE.match(_checksummed(relative.rsplit("/", 1)[-1]))
        if match and int(match.group(1)) > to_batch + 1:
            store.delete(f"{state}/{relative}")
            deleted += 1
    return deleted


def _batch_of(name: str) -> int | None:
    """The batch of an offsets or commits file, also of its checksum files."""
    stripped = _checksummed(name)
    return int(stripped) if stripped.isdigit() else None


def _checksummed(name: str) -> str:
    """The file a checksum file is of, or ``name`` itself: Hadoop's local file system
    keeps ``.F.crc`` beside F, and Spark its own ``F.crc`` (itself with a ``.F.crc.crc``).
    A roll-back that left a later batch's checksum would make the batch, written again,
    fail Spark's verification where the old checksum is not overwritten."""
    while name.endswith(".crc"):
        name = name[1:-4] if name.startswith(".") else name[:-4]
    return name
