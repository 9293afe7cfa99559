"""The exit hook of background work (runtime/background.py): registered while work is live and
only then, stopping readers before fetchers, each once, whatever one of them raises. (That a script
leaving a remote epoch open exits at once and quietly: tests/storage/test_streaming.py.)"""

from __future__ import annotations

import atexit

import pytest

from lovecraft_convert.runtime import background


@pytest.fixture
def registry(monkeypatch) -> tuple[background._Registry, list[str]]:
    """A registry of its own whose calls to atexit are recorded (and not made): atexit cannot be
    read back (its count of callbacks does not go down when one is unregistered)."""
    calls: list[str] = []
    monkeypatch.setattr(atexit, "register", lambda fn: calls.append("register"))
    monkeypatch.setattr(atexit, "unregister", lambda fn: calls.append("unregister"))
    return background._Registry(), calls


def test_the_hook_is_registered_while_work_is_live_and_only_then(registry):
    reg, calls = registry
    a = reg.start(lambda: None, background.READER)
    b = reg.start(lambda: None, background.FETCHER)
    assert (calls, len(reg.live)) == (["register"], 2)  # one hook for any number of them
    a.end()
    assert (calls, len(reg.live)) == (["register"], 1)
    b.end()
    b.end()  # ending twice is nothing
    assert (calls, len(reg.live)) == (["register", "unregister"], 0)
    reg.start(lambda: None, background.READER).end()
    assert calls == ["register", "unregister"] * 2


def test_the_hook_stops_readers_then_fetchers_each_once_past_a_failure(registry):
    reg, calls = registry
    stopped: list[str] = []

    def failing() -> None:
        stopped.append("reader 2")
        raise OSError("a read that cannot stop")

    tokens = [
        reg.start(lambda: stopped.append("fetcher"), background.FETCHER),
        reg.start(lambda: stopped.append("reader 1"), background.READER),
        reg.start(failing, background.READER),
    ]
    reg.stop_all()  # what the interpreter's exit runs
    assert stopped == ["reader 1", "reader 2", "fetcher"]
    assert (calls, len(reg.live)) == (["register", "unregister"], 0)
    for t in tokens:
        t.end()  # the owners' own closing, later, changes nothing
    reg.stop_all()
    assert stopped == ["reader 1", "reader 2", "fetcher"]


def test_a_closed_loader_leaves_no_work_registered(tmp_path):
    import numpy as np

    import lovecraft_convert as lc

    np.save(tmp_path / "x.npy", np.arange(100_000, dtype=np.int64))
    out = str(tmp_path / "out")
    lc.convert([str(tmp_path / "x.npy")], out, to="parquet")
    before = background.live()
    it = lc.open_dataset(out).batches(256, shuffle=True, seed=0)
    next(it)
    assert background.live() > before  # its threads are reading ahead
    it.close()
    assert background.live() == before
