"""The ``credentials`` group: the federation's secrets made for a deployment whose parts
run apart, and the acting participant's token."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from medusa_apps.cli.common import _fail, console


def credentials_init(
    participants: Annotated[str, typer.Option(
        help="The participants, comma-separated, e.g. alpha,beta.")],
    directory: Annotated[Path, typer.Option(
        "--dir", help="Where to write: a folder per holder (federation, each participant, "
                      "each participant's brokers, the registry).")],
    owner: Annotated[str | None, typer.Option(
        help="UID:GID to own the files (the containers' user), readable by it and its "
             "group only \\[default: the caller, readable by it only].")] = None,
) -> None:
    """Make the federation's secrets, or keep the ones made before, split by who holds
    them: each participant's parts get only that participant's."""
    from medusa.credential_files import write_all

    names = [name.strip() for name in participants.split(",") if name.strip()]
    bad = [name for name in names if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", name)]
    if not names or bad:
        raise _fail(f"--participants: expected names such as alpha,beta, got {participants!r}",
                    2)
    owned_by = None
    if owner is not None:
        match = re.fullmatch(r"(\d+):(\d+)", owner)
        if match is None:
            raise _fail(f"--owner: expected UID:GID such as 1000:0, got {owner!r}", 2)
        owned_by = (int(match.group(1)), int(match.group(2)))
    written = write_all(directory, names, owned_by)
    for holder, files in written.items():
        console.print(f"{holder:<16} {', '.join(path.name for path in files)}")


def credentials_token() -> None:
    """Print the acting participant's token (`medusa --as P credentials token`), to sign in
    to the console or call the catalog's write API. Printed only when asked for, to stdout."""
    from medusa import credentials

    own = credentials.own_token()
    if own is None:
        raise _fail(f"no credentials in {credentials.process_credentials_file()}: "
                    "`medusa up` makes them")
    print(own[1])
