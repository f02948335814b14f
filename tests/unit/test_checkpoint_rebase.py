"""Rebasing a moved fragment's checkpoint onto another cluster's SUnion topic, on files
laid out as Spark writes them."""

import json

import pytest

from medusa_spark.checkpoints import rebase_source

pytestmark = pytest.mark.unit

TOPIC = "net.medusa.net.f.in"


def _offsets(topic_offset: int) -> str:
    return "\n".join(["v1", json.dumps({"batchWatermarkMs": 0}),
                      json.dumps({TOPIC: {"0": topic_offset}})])


def test_the_last_committed_batch_reads_the_new_topic_and_later_batches_are_gone(tmp_path
                                                                                  ) -> None:
    offsets, commits = tmp_path / "offsets", tmp_path / "commits"
    offsets.mkdir()
    commits.mkdir()
    for batch in (5, 6):  # 6 was planned on the old node, never committed
        (offsets / str(batch)).write_text(_offsets(100 + batch))
        (offsets / f".{batch}.crc").write_bytes(b"x")
    (commits / "5").write_text("v1\n{}")
    (commits / ".5.crc").write_bytes(b"x")

    assert rebase_source(str(tmp_path), TOPIC, {0: 7}) == 5

    assert sorted(p.name for p in offsets.iterdir()) == ["5"]
    assert json.loads((offsets / "5").read_text().splitlines()[2]) == {TOPIC: {"0": 7}}
    # The later batch's checksum goes too: Spark's own write of batch 6 would fail on it.
    assert sorted(p.name for p in commits.iterdir()) == [".5.crc", "5"]


def test_the_positions_a_sunion_resumed_from_stay_with_the_checkpoint(tmp_path) -> None:
    from medusa_spark.checkpoints import read_resume, sync_checkpoint, write_resume

    positions = {"readings": {"0": 17, "1": 4}}
    (tmp_path / "here").mkdir()
    write_resume(str(tmp_path / "here"), 11, positions)
    # A fragment moved on before it committed another batch: the next node finds them.
    sync_checkpoint(str(tmp_path / "here"), str(tmp_path / "there"))
    assert read_resume(str(tmp_path / "there"), 11) == positions
    assert read_resume(str(tmp_path / "there"), 12) is None
