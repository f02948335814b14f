import pytest

from medusa.envelope import (
    ID_HEADER,
    STIME_HEADER,
    TYPE_HEADER,
    Envelope,
    EnvelopeError,
    TupleType,
    boundary,
    decode_record,
    parse_headers,
)

pytestmark = pytest.mark.unit


def test_headers_round_trip() -> None:
    envelope = Envelope(TupleType.TENTATIVE, "lr/pr/0/7/30", 1_700_000_000_123)
    headers = envelope.headers([("traceparent", b"00-abc")])
    assert headers[:3] == [
        (TYPE_HEADER, b"TENTATIVE"), (ID_HEADER, b"lr/pr/0/7/30"), (STIME_HEADER, b"1700000000123")
    ]
    assert parse_headers(headers) == envelope


def test_decode_record_keeps_value_and_ignores_other_headers() -> None:
    headers = [("other", b"x"), *Envelope(TupleType.STABLE, "a", 5).headers()]
    record = decode_record(headers, {"v": 1})
    assert (record.type, record.tuple_id, record.stime, record.value) == (
        TupleType.STABLE, "a", 5, {"v": 1})


def test_boundary_ids_are_per_partition_and_stime() -> None:
    assert boundary("src", 3, 99).tuple_id == "src/boundary/3/99"
    assert boundary("src", 3, 99).type is TupleType.BOUNDARY


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([], "lacks envelope header"),
        ([(TYPE_HEADER, b"STABLE"), (ID_HEADER, b"x")], STIME_HEADER),
        ([(TYPE_HEADER, b"NOPE"), (ID_HEADER, b"x"), (STIME_HEADER, b"1")], "unknown tuple type"),
        ([(TYPE_HEADER, b"STABLE"), (ID_HEADER, b"x"), (STIME_HEADER, b"soon")], "not an integer"),
    ],
)
def test_bad_headers_say_what_is_wrong(headers: list[tuple[str, bytes]], message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        parse_headers(headers)
