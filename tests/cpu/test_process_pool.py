"""leantile.process_pool: the workers `kernels`, the suite and the search start are spawned, no
more than the free memory holds, deaf to Ctrl-C (the command ends them), and stopped mid-task."""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import Future, wait

from leantile import process_pool


def _sigint_handler() -> bool:
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_workers_are_capped_by_memory_and_leave_ctrl_c_to_the_command(monkeypatch):
    monkeypatch.setattr(process_pool, "memory_for_workers", lambda bytes_each=0: 2)
    pool = process_pool.spawn_pool(8)
    try:
        assert pool._max_workers == 2
        assert pool.submit(_sigint_handler).result(timeout=120) is True
    finally:
        process_pool.stop_now(pool)


def test_stop_now_ends_a_worker_mid_task_and_reaps_it():
    pool = process_pool.spawn_pool(1)
    busy = pool.submit(_pid_after, 300)
    pid = pool.submit(_pid_after, 0)  # queued behind the busy one: dropped
    deadline = time.time() + 60
    while not pool._processes and time.time() < deadline:  # the worker has started
        time.sleep(0.1)
    procs = list(pool._processes.values())
    t0 = time.time()
    process_pool.stop_now(pool)
    assert time.time() - t0 < 15 and procs and all(not p.is_alive() for p in procs)
    # neither is left waiting: the queued one is cancelled, or failed with the busy one once the
    # executor's thread sees its worker gone (at once or a moment later: not a result of _pid_after)
    done, waiting = wait([busy, pid], timeout=60)
    assert not waiting and all(f.cancelled() or f.exception() is not None for f in done)


def test_no_process_possible_means_no_pool(monkeypatch):
    import concurrent.futures

    def no_processes(**_kw):
        raise OSError(38, "Function not implemented")  # sem_open where no /dev/shm is mounted
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_processes)
    assert process_pool.spawn_pool(4) is None


def test_memory_for_workers_reads_the_free_memory():
    with open("/proc/meminfo") as f:
        free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    # MiB-sized workers: as many as MiB free (the free memory moves between the two reads: 256 MiB of slack)
    assert abs(process_pool.memory_for_workers(1 << 20) - free // (1 << 20)) <= 256
    assert process_pool.memory_for_workers(1 << 50) == 1  # more than any machine has: still one


def test_a_cancelled_future_nobody_told_of_is_told():
    """A future cancelled by shutdown(cancel_futures=True) stays pending for wait() until someone
    calls set_running_or_notify_cancel (the executor's thread, which a dead pool may never run):
    stop_now tells them itself."""
    f = Future()
    assert f.cancel()
    assert wait([f], timeout=0).not_done == {f}  # the race stop_now closes
    process_pool.tell_cancelled([f])
    assert wait([f], timeout=0).done == {f}
    process_pool.tell_cancelled([f])  # told twice: nothing happens


def test_stop_now_tells_what_the_executors_thread_cancelled_late():
    """A pool whose own thread cancels the queued future a moment after shutdown returns (as the
    executor's may) and does not tell its waiters: stop_now waits for that thread, then tells, so
    wait() returns the future at once. (Telling it earlier, while the thread still runs, races the
    thread's own set_running_or_notify_cancel, which then raises and kills it.)"""
    import threading

    class Item:
        def __init__(self, future):
            self.future = future

    class SlowPool:  # the executor's attributes stop_now reads
        _processes: dict = {}

        def __init__(self, futures):
            self._pending_work_items = {i: Item(f) for i, f in enumerate(futures)}
            self._executor_manager_thread = None

        def shutdown(self, wait=True, cancel_futures=False):
            def late():
                time.sleep(0.3)
                for item in self._pending_work_items.values():
                    item.future.cancel()
            self._executor_manager_thread = threading.Thread(target=late)
            self._executor_manager_thread.start()
    queued, taken = Future(), Future()
    assert taken.set_running_or_notify_cancel()  # a worker has it: not cancelled
    process_pool.stop_now(SlowPool([queued, taken]))
    assert queued.cancelled() and wait([queued], timeout=0).done == {queued}
    assert taken.running()


def test_stop_now_leaves_the_executors_thread_its_futures():
    """The executor's thread, still running when stop_now starts, hands the queued future to the
    call queue (set_running_or_notify_cancel, which raises on a future already told of its
    cancelling and so would kill the thread, leaving the running future pending forever):
    stop_now must not have told it first."""
    import threading
    errors = []

    class Item:
        def __init__(self, future):
            self.future = future

    class BusyPool:
        _processes: dict = {}

        def __init__(self, future):
            self._pending_work_items = {0: Item(future)}
            self._executor_manager_thread = None

        def shutdown(self, wait=True, cancel_futures=False):
            def hand_over():
                time.sleep(0.3)
                try:
                    self._pending_work_items[0].future.set_running_or_notify_cancel()
                except RuntimeError as e:
                    errors.append(e)
            self._executor_manager_thread = threading.Thread(target=hand_over)
            self._executor_manager_thread.start()
    queued = Future()
    process_pool.stop_now(BusyPool(queued))
    assert not errors


_EXITS = """
import sys, time
sys.path.insert(0, {python!r})
from leantile import process_pool
pool = process_pool.spawn_pool(2)
futures = [pool.submit(time.sleep, 300) for _ in range(6)]
deadline = time.time() + 60
while len(pool._processes) < 2 and time.time() < deadline:
    time.sleep(0.1)
process_pool.stop_now(pool)
"""


def test_a_process_that_stops_its_pool_mid_task_exits():
    """The interpreter's exit waits on the executor's thread: stopped workers first (stop_now), it
    exits at once. (The GPU campaign shut its pool down before killing the workers: at exit the
    thread still waited on them, and the process hung until its timeout, twice.) Any pool a
    command or benchmark ends mid-task goes through stop_now: nothing else calls shutdown(wait=False)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", _EXITS.format(python=str(root / "python"))], timeout=120,
                       capture_output=True, text=True)
    assert r.returncode == 0 and time.time() - t0 < 60, r.stderr[-2000:]
    pattern = "shutdown(wait=" + "False"
    offenders = [str(p.relative_to(root)) for d in ("python", "benchmarks") for p in (root / d).rglob("*.py")
                 if pattern in p.read_text() and p.name != "process_pool.py"]
    assert not offenders, offenders
