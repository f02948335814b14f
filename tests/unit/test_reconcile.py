"""DPC's checkpoint roll-back on a checkpoint laid out as Spark writes it, and the DPC
record kept beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from medusa_spark.reconcile import DpcRecord, RollbackError, rollback

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


def test_rollback_before_the_first_batch_and_past_what_is_kept(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 3)
    rollback(str(tmp_path), -1)
    assert not any(p.name.isdigit() for p in (tmp_path / "commits").iterdir())
    assert not (tmp_path / "state").exists(), "Spark refuses a state folder on batch 0"
    _checkpoint(tmp_path, 3)
    with pytest.raises(RollbackError, match="no longer holds batch 7"):
        rollback(str(tmp_path), 7)


def test_the_dpc_record_survives_beside_the_checkpoint(tmp_path: Path) -> None:
    assert DpcRecord.load(str(tmp_path)) == DpcRecord()
    record = DpcRecord(tentative_since_batch=5, tentative_epoch=2, skip_epoch=2)
    record.save(str(tmp_path))
    loaded = DpcRecord.load(str(tmp_path))
    assert loaded == record and loaded.reconciling
