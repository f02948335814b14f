"""The stack's processes each run in a process group of their own; the nodes share the
caller's session, so that a rebuild's lower priority counts against the other nodes'
queries (Linux's autogroups share the CPU evenly between sessions, whatever the nice
values inside them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from medusa.stack import processes

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("own_session", [True, False])
def test_a_process_has_a_group_of_its_own_and_a_session_as_asked(
        tmp_path: Path, own_session: bool) -> None:
    started = processes.start("sleeper", ["sleep", "30"], tmp_path / "sleeper.log",
                              own_session=own_session)
    try:
        assert os.getpgid(started.pid) == started.pid
        session = os.getsid(started.pid)
        assert (session == started.pid) if own_session else (session == os.getsid(0))
    finally:
        processes.stop(started, timeout_s=5)
    assert not started.alive()
