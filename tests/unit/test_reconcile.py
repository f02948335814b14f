"""DPC's checkpoint roll-back on a checkpoint laid out as Spark writes it, and the DPC
record kept beside it, with the REDO's traceparent the reconciliation's spans join."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from medusa_spark.fragment_writer import redo_traceparent
from medusa_spark.reconcile import RECORD_FILE, DpcRecord, RollbackError, rollback
from medusa_spark.streams import REDO, TRACE

pytestmark = pytest.mark.unit


def _checkpoint(root: Path, batches: int) -> None:
    for batch in range(batches):
        for folder in ("offsets", "commits"):
            (root / folder).mkdir(parents=True, exist_ok=True)
            (root / folder / str(batch)).write_text("v1")
            (root / folder / f".{batch}.crc").write_text("")
        store = root / "state" / "0" / "1"
        store.mkdir(parents=True, exist_ok=True)
        (store / f"{batch + 1}.changelog").write_text("")
        if batch % 3 == 0:
            (store / f"{batch + 1}.zip").write_text("")
    (root / "metadata").write_text("{}")


def test_rollback_keeps_the_batches_up_to_the_one_named_and_their_state(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 8)
    rollback(str(tmp_path), 4)
    assert sorted(p.name for p in (tmp_path / "commits").iterdir() if p.name.isdigit()) == \
        ["0", "1", "2", "3", "4"]
    assert not (tmp_path / "offsets" / ".6.crc").exists()
    state = sorted(p.name for p in (tmp_path / "state" / "0" / "1").iterdir())
    # version v is the state after batch v - 1: batch 4's is version 5.
    assert state == ["1.changelog", "1.zip", "2.changelog", "3.changelog", "4.changelog",
                     "4.zip", "5.changelog"]
    assert (tmp_path / "metadata").is_file()


def test_rollback_drops_the_later_batches_checksum_files_too(tmp_path: Path) -> None:
    """Spark's own checksum of a file (F.crc) and Hadoop's (.F.crc), of both kinds of file:
    a checksum left behind would not match the batch written again."""
    _checkpoint(tmp_path, 8)
    store = tmp_path / "state" / "0" / "1"
    for version in range(1, 9):
        for name in (f"{version}.changelog.crc", f".{version}.changelog.crc",
                     f".{version}.changelog.crc.crc"):
            (store / name).write_text("")
    for batch in range(8):
        (tmp_path / "commits" / f"{batch}.crc").write_text("")
    rollback(str(tmp_path), 4)
    left = {p.name for p in store.iterdir()}
    assert {"5.changelog.crc", ".5.changelog.crc", ".5.changelog.crc.crc"} <= left
    assert not {n for n in left if n.lstrip(".").split(".")[0] in {"6", "7", "8"}}
    assert {p.name for p in (tmp_path / "commits").iterdir()} == {
        name for batch in range(5) for name in (str(batch), f".{batch}.crc", f"{batch}.crc")}


def test_rollback_before_the_first_batch_and_past_what_is_kept(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 3)
    rollback(str(tmp_path), -1)
    assert not any(p.name.isdigit() for p in (tmp_path / "commits").iterdir())
    assert not (tmp_path / "state").exists(), "Spark refuses a state folder on batch 0"
    _checkpoint(tmp_path, 3)
    with pytest.raises(RollbackError, match="no longer holds batch 7"):
        rollback(str(tmp_path), 7)


TRACEPARENT = "00-7ab6c69024106c5fb0cf9935a62951fe-1de5f4b86b38a442-01"


def test_the_dpc_record_survives_beside_the_checkpoint(tmp_path: Path) -> None:
    assert DpcRecord.load(str(tmp_path)) == DpcRecord()
    record = DpcRecord(tentative_since_batch=5, tentative_epoch=2, skip_epoch=2,
                       redo_traceparent=TRACEPARENT, rolled_back_batches=6)
    record.save(str(tmp_path))
    loaded = DpcRecord.load(str(tmp_path))
    assert loaded == record and loaded.reconciling
    assert loaded.redo_traceparent == TRACEPARENT and loaded.rolled_back_batches == 6


def test_a_period_makes_results_tentative_from_its_first_batch_until_rec_done() -> None:
    record = DpcRecord()
    assert not record.read_batch(3, None) and record.tentative_in(3) is None
    assert record.read_batch(4, 1) and record.tentative_in(4) == 1
    assert not record.read_batch(5, 1) and record.tentative_in(5) == 1
    assert record.tentative_since_batch == 4
    # The node rolls back to batch 3 and redoes with period 1 left out.
    record.skip_epoch, record.tentative_since_batch = 1, None
    assert not record.read_batch(4, None) and record.tentative_in(4) is None
    record.rec_done()
    assert not record.reconciling and record.tentative_since_batch is None


def test_a_failure_during_stabilization_keeps_its_first_batch_past_the_rec_done() -> None:
    record = DpcRecord()
    record.read_batch(4, 1)
    record.skip_epoch, record.tentative_since_batch = 1, None  # rolled back to batch 3
    # The redo's first batch already reads records of period 2: tentative again.
    assert record.read_batch(4, 2) and record.tentative_in(4) == 2
    record.rec_done()  # of period 1
    assert record.tentative_since_batch == 4, "period 2's roll-back must reach batch 3 again"
    assert not record.read_batch(6, 2) and record.tentative_in(6) == 2



def test_a_record_written_before_the_trace_fields_still_loads(tmp_path: Path) -> None:
    (tmp_path / RECORD_FILE).write_text(json.dumps(
        {"tentative_since_batch": None, "tentative_epoch": 1, "skip_epoch": 1,
         "rec_done_epoch": 0, "redo_through": 4000}))
    loaded = DpcRecord.load(str(tmp_path))
    assert loaded.reconciling and loaded.redo_traceparent is None


def test_the_redo_traceparent_is_read_from_the_redo_boundaries_of_a_batch() -> None:
    batch = pa.table({
        REDO: pa.array([None, None, 2, 2, None], pa.int32()),
        TRACE: pa.array(["00-sampled-tuple", None, None, TRACEPARENT, None], pa.string()),
    })
    assert redo_traceparent(batch, 2) == TRACEPARENT
    assert redo_traceparent(batch, 3) is None
    assert redo_traceparent(batch.slice(0, 3), 2) is None, "a REDO from an untraced SUnion"
