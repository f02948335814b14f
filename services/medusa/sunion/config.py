"""The SUnion's configuration: one JSON file per hosted fragment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator


class SUnionInput(BaseModel):
    """One input of the fragment: a network stream or an upstream box's output topic."""

    name: str = Field(min_length=1)
    """The stream or upstream box this input is, e.g. ``position_reports``; written on
    every tuple in the ``medusa.input`` header."""
    topic: str = Field(min_length=1)
    bootstrap: str = Field(min_length=1)
    """The cluster the topic lives on (any participant's)."""


class SUnionConfig(BaseModel):
    fragment: str = Field(min_length=1)
    """Global fragment name, e.g. ``alpha/linear-road/main`` (logs, ids)."""
    inputs: list[SUnionInput] = Field(min_length=1)
    output_topic: str = Field(min_length=1)
    """The fragment's input topic on the node's own cluster; created when missing."""
    output_bootstrap: str = Field(min_length=1)
    output_partitions: int = Field(1, ge=1)
    bucket_ms: int = Field(1000, gt=0)
    """Bucket width; the default is the producers' BOUNDARY interval."""
    max_delay_ms: int | None = Field(None, gt=0)
    """DPC's delay D: the longest a bucket that some inputs have passed waits for the
    others before it goes out TENTATIVE (see ``buckets``); None: it waits for them all."""
    partition_share: tuple[int, int] | None = None
    """(index, count): read only the input partitions p with p % count == index (one
    instance of a fragment scaled out by partition); None: every partition."""
    start_positions: dict[str, dict[int, int]] | None = None
    """Input name -> partition -> offset to start from when the output topic holds no
    SUnion state yet (a fragment moved to another cluster); None: earliest."""
    resume_from: dict[str, Any] | None = None
    """A positions record (``POSITIONS_HEADER``'s JSON) to resume from instead of what the
    output topic holds: set when a fragment moves to a node of another cluster, from the
    record its last committed batch read on the old cluster."""
    state_file: str | None = None
    """Where ``SUnion.state()`` is written as JSON about every second (atomically)."""
    otlp_endpoint: str | None = None
    """Where the SUnion's traces go (OTLP gRPC, the federation's Jaeger), one per UP_FAILURE
    period; None: not traced."""

    @model_validator(mode="after")
    def _inputs_distinct(self) -> SUnionConfig:
        names = [i.name for i in self.inputs]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"fragment {self.fragment}: input names repeated: {duplicated}")
        places = [(i.bootstrap, i.topic) for i in self.inputs]
        if len(set(places)) != len(places):
            raise ValueError(f"fragment {self.fragment}: two inputs read the same topic")
        if self.partition_share is not None and \
                not 0 <= self.partition_share[0] < self.partition_share[1]:
            raise ValueError(f"fragment {self.fragment}: partition_share {self.partition_share}"
                             " needs 0 <= index < count")
        unknown = sorted(set(self.start_positions or {}) - set(names))
        if unknown:
            raise ValueError(f"fragment {self.fragment}: start_positions names unknown "
                             f"input(s) {unknown}")
        return self


def load_config(path: str | Path) -> SUnionConfig:
    return SUnionConfig.model_validate_json(Path(path).read_text())


def dump_config(config: SUnionConfig, path: str | Path) -> None:
    Path(path).write_text(config.model_dump_json(indent=2))
