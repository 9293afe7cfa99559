"""Waits on another thread's lock are never cut inside that lock: an interrupt that arrives while
the queue, future or thread is locked is raised only once the operation has finished (an interrupt
raised inside would leave the lock taken, and the other thread, then the cleanup, blocked on it)."""

import os
import queue
import signal
import threading
import time
from concurrent.futures import Future

import pytest

from lovecraft_convert.runtime import interrupts


class SignalInsideLock(queue.Queue):
    """A queue whose put and get send SIGINT to this process while its lock is held."""

    def _put(self, item):
        os.kill(os.getpid(), signal.SIGINT)
        super()._put(item)
        self.inside = interrupts.pending()

    def _get(self):
        os.kill(os.getpid(), signal.SIGINT)
        item = super()._get()
        self.inside = interrupts.pending()
        return item


def test_put_is_finished_then_the_interrupt_raised():
    q = SignalInsideLock(maxsize=1)
    with interrupts.Signals(), pytest.raises(KeyboardInterrupt):
        interrupts.put_while(q, "x", lambda: True)
    assert q.inside is True  # held while the lock was taken
    assert q.mutex.acquire(blocking=False)  # and the lock was released
    q.mutex.release()
    assert list(q.queue) == ["x"]  # the put finished


def test_get_is_finished_then_the_interrupt_raised():
    q = SignalInsideLock(maxsize=1)
    q.queue.append("y")
    with interrupts.Signals(), pytest.raises(KeyboardInterrupt):
        interrupts.get_polled(q)
    assert q.inside is True and q.empty()
    assert q.mutex.acquire(blocking=False)
    q.mutex.release()


def test_result_and_join_wait_in_slices_and_raise_an_interrupt_between_them():
    fut: Future = Future()
    t = threading.Timer(0.35, fut.set_result, args=(7,))
    t.start()
    assert interrupts.result(fut, poll=0.05) == 7
    interrupts.join(t, poll=0.05)
    assert not t.is_alive()

    slow = threading.Thread(target=threading.Event().wait, args=(0.5,))
    slow.start()
    threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGINT)).start()
    with interrupts.Signals(), pytest.raises(KeyboardInterrupt):
        interrupts.join(slow, poll=0.05)
    assert slow.is_alive()  # raised between slices, not after the thread ended
    slow.join()


def test_outside_the_main_thread_nothing_is_raised():
    """A pending interrupt is the main thread's: a reader thread's put never raises it."""
    seen = []
    q: queue.Queue = queue.Queue()
    interrupts._state["pending"] = True
    try:
        t = threading.Thread(target=lambda: seen.append(interrupts.put_while(q, 1, lambda: True)))
        t.start()
        t.join()
        assert seen == [True] and interrupts.pending()
    finally:
        interrupts._state["pending"] = False


def test_map_daemons_gives_results_in_order_raises_the_first_error_and_leaves_no_thread():
    import threading
    import time

    from lovecraft_convert.runtime.interrupts import map_daemons

    before = set(threading.enumerate())
    assert map_daemons(lambda x: (time.sleep(0.001 * (x % 3)), x * x)[1], list(range(50)), 4, "t") == [
        x * x for x in range(50)
    ]
    # on success every thread it started has ended (threads of earlier tests may end meanwhile:
    # a C++ thread's _DummyThread that Python had seen, in a whole-suite run)
    assert not set(threading.enumerate()) - before

    def fails(x):
        if x in (7, 9):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 7"):
        map_daemons(fails, list(range(20)), 1, "t")  # one thread: 7 is met first, 9 never started
    assert map_daemons(str, [], 4, "t") == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_handler_of_the_applications_own_is_left_alone(sig):
    """A training script's SIGTERM handler (a checkpoint on preemption) was replaced for the whole
    of a library call, and never ran (an outside trial); a SIGINT one was left alone already. A
    default handler is taken over, and put back."""
    from lovecraft_convert.runtime.interrupts import Signals

    seen = []

    def own(signum, frame):
        seen.append(signum)

    old = signal.signal(sig, own)
    try:
        with Signals():
            assert signal.getsignal(sig) is own
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        assert seen == [sig]
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        with Signals():
            assert signal.getsignal(sig) not in (own, signal.default_int_handler, signal.SIG_DFL)
        assert signal.getsignal(sig) in (signal.default_int_handler, signal.SIG_DFL)
    finally:
        signal.signal(sig, old)
