"""Fuzzes the Linear Road line parsers (``parse_csv_line`` and ``parse_history_line``): any
line is a record or a CsvLineError that names the field it is about (its name or
``field N``).

Run: ``python tests/fuzz/fuzz_csv.py -runs=10000 -max_len=256 [corpus dirs]``.
"""

from __future__ import annotations

import re
import sys

import atheris

with atheris.instrument_imports(include=["medusa"]):
    from medusa.linear_road.records import (
        HISTORY_FIELDS,
        CsvLineError,
        parse_csv_line,
        parse_history_line,
    )

# The benchmark's CSV field names, and the names the parser's messages use for some.
CSV_FIELDS = ("type", "time", "vid", "spd", "speed", "xway", "lane", "dir", "seg", "pos", "qid",
              "s_init", "s_end", "dow", "tod", "day")
NAMES_A_FIELD = re.compile(
    r"\bfield \d+|\b(" + "|".join((*CSV_FIELDS, *HISTORY_FIELDS)) + r")\b", re.IGNORECASE)


def check_rejection(error: CsvLineError) -> None:
    if not NAMES_A_FIELD.search(str(error)):
        raise AssertionError(f"rejection names no field: {str(error)!r}") from error


def test_one_input(data: bytes) -> None:
    # The sources read the files as text (UTF-8), so every line they parse is a str.
    line = data.decode("utf-8", errors="replace")
    for parse in (parse_csv_line, parse_history_line):
        try:
            parse(line)
        except CsvLineError as error:
            check_rejection(error)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
