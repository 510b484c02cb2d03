"""data/parallel.py: results in order, errors raised in the caller, serial where processes take the cores."""

import threading

import pytest

from foxhunt.data import parallel


def test_map_threads_keeps_order_and_uses_a_second_thread(monkeypatch):
    monkeypatch.setenv(parallel.ENV, "2")
    seen = set()

    def square(x):
        seen.add(threading.get_ident())
        return x * x

    assert parallel.map_threads(square, range(50)) == [x * x for x in range(50)]
    assert threading.get_ident() in seen  # the caller works too


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
