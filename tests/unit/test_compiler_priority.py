"""The JVM's compiler threads follow the node's rebuilds: found by name, reniced while a
rebuild runs and back after (here on threads of this process named as the JVM names them)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from medusa_spark.compiler_priority import CompilerPriority, compiler_threads
from medusa_spark.session import REBUILD_NICE, can_renice_back

pytestmark = pytest.mark.unit


@contextmanager
def thread_named(name: str) -> Iterator[int]:
    """A thread of this process that Linux shows as ``name``; yields its id."""
    started, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def body() -> None:
        tids.append(threading.get_native_id())
        with open(f"/proc/self/task/{tids[0]}/comm", "w") as comm:
            comm.write(name)
        started.set()
        done.wait(30)
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield tids[0]
    finally:
        done.set()
        thread.join()


def test_the_compiler_threads_are_found_by_their_names() -> None:
    with thread_named("C2 CompilerThre") as c2, thread_named("C1 CompilerThre") as c1, \
            thread_named("GC Thread#0") as gc:
        found = compiler_threads(os.getpid())
    assert c1 in found and c2 in found and gc not in found
    assert compiler_threads(2 ** 22 + 7) == [], "a process that is gone has none"


@pytest.mark.skipif(not can_renice_back(), reason="needs CAP_SYS_NICE to renice back")
def test_the_compilers_run_at_a_rebuilds_priority_while_one_runs_and_back_after() -> None:
    priority = CompilerPriority(os.getpid())
    with thread_named("C2 CompilerThre") as c2, thread_named("VM Thread") as vm:
        priority.follow(rebuilding=True)
        assert os.getpriority(os.PRIO_PROCESS, c2) == REBUILD_NICE
        assert os.getpriority(os.PRIO_PROCESS, vm) == 0, "only the compilers"
        priority.follow(rebuilding=False)
        assert os.getpriority(os.PRIO_PROCESS, c2) == 0


def test_without_a_jvm_it_renices_nothing() -> None:
    with thread_named("C2 CompilerThre") as c2:
        before = os.getpriority(os.PRIO_PROCESS, c2)
        CompilerPriority(None).follow(rebuilding=True)
        assert os.getpriority(os.PRIO_PROCESS, c2) == before
