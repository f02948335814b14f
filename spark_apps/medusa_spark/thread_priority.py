"""Nice values of another process's threads. On Linux a nice value belongs to a thread,
not to its process: ``setpriority`` on a process id changes its main thread alone, and a
new thread takes the value of the thread that starts it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def threads_of(pid: int, named: tuple[str, ...] = ()) -> list[int]:
    """The ids of process ``pid``'s threads, or of those whose names (as Linux shows them,
    cut to 15 characters) begin with one of ``named``; none where it is gone."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if not named or (task / "comm").read_text().strip().startswith(named):
                found.append(int(task.name))
        except OSError:  # the thread ended meanwhile
            continue
    return found


def renice(tids: list[int], nice: int) -> None:
    """Sets each thread's nice value; a thread gone meanwhile is skipped."""
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError:
            continue


def threads_at(pid: int, nice: int) -> list[int]:
    """The ids of process ``pid``'s threads whose nice value is ``nice``."""
    found = []
    for tid in threads_of(pid):
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) == nice:
                found.append(tid)
        except OSError:  # the thread ended meanwhile
            continue
    return found


@contextmanager
def this_thread_at(nice: int, allowed: bool = True) -> Iterator[None]:
    """The calling thread at ``nice`` meanwhile, then back at its own value; nothing
    unless ``allowed`` (where the value could not be lowered back). Threads and processes
    it starts meanwhile take the value too: keep it to work that starts none."""
    with thread_at(threading.get_native_id(), nice, allowed):
        yield


@contextmanager
def thread_at(tid: int, nice: int, allowed: bool = True) -> Iterator[None]:
    """Thread ``tid`` (of any process) at ``nice`` meanwhile, then back at its own value
    (see ``this_thread_at``)."""
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        allowed = False
    if not allowed or before >= nice:
        yield
        return
    renice([tid], nice)
    try:
        yield
    finally:
        renice([tid], before)
