"""data/util/parallel.py: results in order, errors raised in the caller, serial where processes take the cores."""

import threading
import time

import pytest

from foxhunt.data.util import parallel


def test_map_threads_keeps_order_and_uses_a_second_thread(monkeypatch):
    monkeypatch.setenv(parallel.ENV, "2")
    seen = set()

    def square(x):
        seen.add(threading.get_ident())
        time.sleep(0.01)  # without the GIL, as numpy's loops and polars' queries run: the other thread takes items
        return x * x

    assert parallel.map_threads(square, range(20)) == [x * x for x in range(20)]
    assert threading.get_ident() in seen and len(seen) == 2  # the caller and the pool thread


def test_one_thread_runs_in_the_caller(monkeypatch):
    monkeypatch.setenv(parallel.ENV, "1")
    idents = parallel.map_threads(lambda _: threading.get_ident(), range(4))
    assert set(idents) == {threading.get_ident()}
    assert parallel.submit(threading.get_ident).result() == threading.get_ident()


def test_serial_block_and_nested_calls_stay_in_one_thread(monkeypatch):
    monkeypatch.setenv(parallel.ENV, "2")
    with parallel.serial():
        assert parallel.threads() == 1
        assert set(parallel.map_threads(lambda _: threading.get_ident(), range(4))) == {threading.get_ident()}
    assert parallel.threads() == 2
    # a pool thread's own split runs in that thread (a pool of one would otherwise wait on itself)
    inner = parallel.submit(lambda: (parallel.threads(), threading.get_ident())).result()
    assert inner[0] == 1


def test_errors_reach_the_caller(monkeypatch):
    monkeypatch.setenv(parallel.ENV, "2")

    def fail(x):
        if x == 3:
            raise ValueError("bad part")
        return x

    with pytest.raises(ValueError, match="bad part"):
        parallel.map_threads(fail, range(5))
    with pytest.raises(ValueError, match="bad part"):
        parallel.submit(fail, 3).result()
    monkeypatch.setenv(parallel.ENV, "1")
    with pytest.raises(ValueError, match="bad part"):
        parallel.submit(fail, 3).result()


def test_map_threads_keeps_order_and_never_waits_behind_a_busy_pool(monkeypatch):
    monkeypatch.setenv("FOXHUNT_DATA_THREADS", "2")
    assert parallel.map_threads(lambda x: x * x, range(20)) == [x * x for x in range(20)]
    release = threading.Event()
    busy = parallel.submit(release.wait)  # the pool thread is taken by an earlier stage
    try:
        names = parallel.map_threads(lambda x: (x, threading.current_thread().name), range(5))
    finally:
        release.set()
    busy.result()
    assert [x for x, _ in names] == list(range(5))
    assert {n for _, n in names} == {threading.current_thread().name}  # all done here, none waited for the pool
    monkeypatch.setenv("FOXHUNT_DATA_THREADS", "1")
    assert parallel.map_threads(lambda x: -x, [1, 2]) == [-1, -2]


def test_map_threads_raises_the_items_error_and_stops_taking_items(monkeypatch):
    monkeypatch.setenv("FOXHUNT_DATA_THREADS", "2")
    done = []

    def fn(x: int) -> int:
        if x == 0:
            raise ValueError("bad item")
        done.append(x)
        return x

    with pytest.raises(ValueError, match="bad item"):
        parallel.map_threads(fn, range(1000))
    assert len(done) < 999  # the pool thread stopped short of the rest
