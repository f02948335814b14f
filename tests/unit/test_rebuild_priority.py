"""What follows the node's rebuilds besides their queries: the JVM's compiler threads,
found by name (here threads of this process named as the JVM names them), and a
rebuilding fragment's SUnion process, every thread of it; reniced while a rebuild runs and
back after."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa_spark import compiler_priority
from medusa_spark.compiler_priority import CompilerPriority, compiler_threads
from medusa_spark.session import REBUILD_NICE, can_renice_back
from medusa_spark.sunion_process import SUnionProcess
from medusa_spark.thread_priority import threads_of
from tests.waiting import first_within

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


@pytest.mark.skipif(not can_renice_back(), reason="needs CAP_SYS_NICE to renice back")
def test_a_batch_a_rebuild_left_niced_runs_on_at_the_normal_priority_once_none_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    priority = CompilerPriority(os.getpid())
    with thread_named("stream executio") as batch, thread_named("Executor task l") as task:
        priority.follow(rebuilding=True)
        os.setpriority(os.PRIO_PROCESS, batch, REBUILD_NICE)  # as the JVM niced its batch
        priority.follow(rebuilding=True)
        assert os.getpriority(os.PRIO_PROCESS, batch) == REBUILD_NICE, "while one runs"
        priority.follow(rebuilding=False)
        assert os.getpriority(os.PRIO_PROCESS, batch) == 0
        os.setpriority(os.PRIO_PROCESS, task, REBUILD_NICE)  # a task the batch starts later
        priority.follow(rebuilding=False)
        assert os.getpriority(os.PRIO_PROCESS, task) == 0
        monkeypatch.setattr(compiler_priority, "SWEEP_S", 0.0)
        os.setpriority(os.PRIO_PROCESS, task, REBUILD_NICE)  # a rehearsal's, long after
        priority.follow(rebuilding=False)
        assert os.getpriority(os.PRIO_PROCESS, task) == REBUILD_NICE
        os.setpriority(os.PRIO_PROCESS, task, 0)


@pytest.mark.skipif(not can_renice_back(), reason="needs CAP_SYS_NICE to renice back")
def test_a_thread_a_dpc_redo_left_niced_goes_back_once_the_redo_has_ended() -> None:
    """A redo is niced but not followed as a rebuild (its compilers stay at 0): once it has
    taken over, the admin client thread its query started niced goes back too."""
    priority = CompilerPriority(os.getpid())
    with thread_named("kafka-admin-cli") as admin, thread_named("C2 CompilerThre") as c2:
        os.setpriority(os.PRIO_PROCESS, admin, REBUILD_NICE)
        priority.follow(rebuilding=False, redoing=True)
        assert os.getpriority(os.PRIO_PROCESS, admin) == REBUILD_NICE, "while it runs"
        assert os.getpriority(os.PRIO_PROCESS, c2) == 0, "its compilers are not niced"
        priority.follow(rebuilding=False, redoing=False)
        assert os.getpriority(os.PRIO_PROCESS, admin) == 0
        assert os.getpriority(os.PRIO_PROCESS, c2) == 0


def test_without_a_jvm_it_renices_nothing() -> None:
    with thread_named("C2 CompilerThre") as c2:
        before = os.getpriority(os.PRIO_PROCESS, c2)
        CompilerPriority(None).follow(rebuilding=True)
        assert os.getpriority(os.PRIO_PROCESS, c2) == before


@pytest.mark.skipif(not can_renice_back(), reason="needs CAP_SYS_NICE to renice back")
def test_a_rebuilding_fragments_sunion_runs_niced_every_thread_and_back_after(
        tmp_path: Path) -> None:
    config = _config()
    sunion = SUnionProcess(config, tmp_path)
    # A stand-in with two threads, as the SUnion's process has several (its Kafka clients').
    sunion.process = subprocess.Popen([sys.executable, "-c", (
        "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
        "time.sleep(60)")])
    try:
        pid = sunion.process.pid
        assert first_within(lambda: len(threads_of(pid)) == 2, 10, interval_s=0.05)
        sunion.follow_rebuild(rebuilding=False)
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads_of(pid)} == {0}
        sunion.follow_rebuild(rebuilding=True)
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads_of(pid)} == {REBUILD_NICE}
        sunion.follow_rebuild(rebuilding=False)
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads_of(pid)} == {0}
    finally:
        sunion.process.kill()
        sunion.process.wait()


@pytest.mark.skipif(not can_renice_back(), reason="needs CAP_SYS_NICE to renice back")
def test_a_rebuilds_sunion_starts_niced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    class _Popen:
        pid = 4242

        def __init__(self, command: list[str], **_: object) -> None:
            started.append(command)
    monkeypatch.setattr(subprocess, "Popen", _Popen)
    config = _config()
    SUnionProcess(config, tmp_path / "a").start(rebuilding=True)
    SUnionProcess(config, tmp_path / "b").start()
    assert started[0][:4] == ["nice", "-n", str(REBUILD_NICE), sys.executable]
    assert started[1][0] == sys.executable


def _config() -> SUnionConfig:
    return SUnionConfig(fragment="f", inputs=[SUnionInput(name="in", topic="t",
                                                          bootstrap="127.0.0.1:1")],
                        output_topic="f.in", output_bootstrap="127.0.0.1:2")


def test_a_thread_runs_niced_meanwhile_and_back_after_where_allowed() -> None:
    from medusa_spark.session import can_renice_back
    from medusa_spark.thread_priority import this_thread_at

    seen: list[int] = []
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def run(allowed: bool) -> None:
        tid = threading.get_native_id()
        with this_thread_at(base + 10, allowed):
            seen.append(os.getpriority(os.PRIO_PROCESS, tid))
        seen.append(os.getpriority(os.PRIO_PROCESS, tid))

    for allowed in (can_renice_back(), False):
        thread = threading.Thread(target=run, args=(allowed,))
        thread.start()
        thread.join()
    assert seen == [base + 10 if can_renice_back() else base, base, base, base]
