"""Fuzzes ``medusa.envelope.parse_headers``: any header list is an Envelope or an
EnvelopeError that names the header it is about.

Input format (so the seed corpus stays readable): one header per line, ``<kind><key>=<value>``,
where kind ``b`` gives a bytes value, ``s`` a str value and ``n`` no value (None).
Run: ``python tests/fuzz/fuzz_envelope.py -runs=10000 -max_len=512 [corpus dirs]``.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["medusa"]):
    from medusa.envelope import ID_HEADER, STIME_HEADER, TYPE_HEADER, EnvelopeError, parse_headers

ENVELOPE_HEADERS = (TYPE_HEADER, ID_HEADER, STIME_HEADER)


def headers_of(data: bytes) -> list[tuple[str, bytes | str | None]]:
    headers: list[tuple[str, bytes | str | None]] = []
    for line in data.split(b"\n"):
        kind, raw_key, _, raw_value = line[:1], *line[1:].partition(b"=")
        # Kafka header keys are str; values arrive as bytes, or str/None from our own code.
        key = raw_key.decode("utf-8", errors="replace")
        value: bytes | str | None = raw_value
        if kind == b"s":
            value = raw_value.decode("utf-8", errors="surrogateescape")
        elif kind == b"n":
            value = None
        headers.append((key, value))
    return headers


def test_one_input(data: bytes) -> None:
    headers = headers_of(data)
    try:
        parse_headers(headers)
    except EnvelopeError as error:
        message = str(error)
        if not any(name in message for name in ENVELOPE_HEADERS):
            raise AssertionError(f"rejection names no header: {message!r}") from error


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
