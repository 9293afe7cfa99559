"""Where a loader stands, as a small JSON-able dict, and the iterator that keeps it.

A state is ``{"lovecraft_state": 1, <what it is of>, "epoch": e, "position": p, ...}``: what it
is of (the dataset's fingerprint from its manifest, the shuffle, seed, batch size... — whatever
changes the order of an epoch) must match the loader it is given to, and ``(epoch, position)`` is
where the next batch comes from. The position counts the epoch's rows (batches of the buckets'
interleave for a bucketed dataset) whose global steps are done, so it means the same with any
number of readers: a state saved by ``W`` ranks resumes with ``W'``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ..errors import DatasetError

STATE_TAG = "lovecraft_state"
STATE_VERSION = 1

# what a saved state must match, and how to say it does not
_MISMATCH: dict[str, tuple[str, Callable[[Any], str]]] = {
    "dataset": ("another dataset", lambda v: f"fingerprint {v}"),
    "datasets": ("another mixture", lambda v: "datasets " + ", ".join(map(str, v))),
    "weights": ("other weights", lambda v: f"weights {v}"),
    "mix_seed": ("another mixture seed", lambda v: f"mixture seed {v}"),
    "exhausted": ("another exhausted=", lambda v: f"exhausted={v!r}"),
    "shuffle": ("another shuffle", lambda v: f"shuffle={v!r}"),
    "seed": ("another seed", lambda v: f"seed {v}"),
    "batch_size": ("another batch size", lambda v: f"batch size {v}"),
    "drop_remainder": ("another drop_remainder", lambda v: f"drop_remainder={v}"),
    "window": ("another shuffle_buffer", lambda v: f"shuffle_buffer={v}"),
    "unit": ("another kind of dataset", lambda v: f"positions in {v}"),
}


class Source(Protocol):
    """What :class:`BatchIterator` reads: a :class:`~.plan.Plan` or a mixture's plan."""

    def identity(self) -> dict[str, Any]: ...

    def end(self, epoch: int) -> int: ...

    def steps(self, epoch: int, reader: tuple[int, int], start: int) -> Iterator[tuple[dict, int]]: ...


def check_state(state: Any, identity: dict[str, Any]) -> tuple[int, int]:
    """``(epoch, position)`` of a saved ``state``, after checking it is a state of ``identity``;
    a DatasetError saying what differs otherwise."""
    if not isinstance(state, dict) or state.get(STATE_TAG) != STATE_VERSION:
        got = state.get(STATE_TAG) if isinstance(state, dict) else type(state).__name__
        raise DatasetError(
            f"the state is not a lovecraft loader state ({STATE_TAG} is {got!r}, expected {STATE_VERSION})",
            hint="give what state_dict() returned (JSON round trips are fine)",
        )
    for key, want in identity.items():
        have = state.get(key)
        if isinstance(want, tuple):
            want = list(want)
        if have != want:
            what, say = _MISMATCH.get(key, (f"another {key}", repr))
            raise DatasetError(
                f"the saved state is of {what} ({say(have)}; this loader has {say(want)})",
                hint="resume with the dataset and options the state was saved with",
            )
    epoch, pos = state.get("epoch"), state.get("position")
    if not (_count(epoch) and _count(pos)):
        raise DatasetError(f"the state's epoch and position are {epoch!r} and {pos!r}, not counts")
    return int(epoch), int(pos)


def check_position(pos: int, end: int, epoch: int) -> None:
    """A state's position must lie in its epoch (its end included: the epoch read to its end)."""
    if pos > end:
        raise DatasetError(
            f"the state's position {pos} is past the end of epoch {epoch}, which has {end} positions",
            hint="give a state a loader of this dataset saved (or ds.state_at(...))",
        )


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def make_state(identity: dict[str, Any], epoch: int, position: int, **extra: Any) -> dict[str, Any]:
    out = {STATE_TAG: STATE_VERSION}
    out.update({k: list(v) if isinstance(v, tuple) else v for k, v in identity.items()})
    out.update(epoch=int(epoch), position=int(position), **extra)
    return out


def check_reader(rank: int, world_size: int) -> tuple[int, int]:
    for name, v in (("rank", rank), ("world_size", world_size)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise DatasetError(f"{name} must be an integer, not {v!r}")
    if not 0 <= rank < world_size:
        raise DatasetError(f"rank {rank} is not in range for world_size {world_size}")
    return rank, world_size


class BatchIterator:
    """Batches of a dataset (or a mixture) for one reader, that knows where it stands:
    :meth:`state_dict` is where the next batch comes from; ``batches(..., state=it.state_dict())``
    goes on from there in a new process, without reading anything before it."""

    def __init__(
        self,
        source: Source,
        *,
        epoch: int = 0,
        epochs: int | None = 1,
        rank: int = 0,
        world_size: int = 1,
        state: dict | None = None,
    ) -> None:
        self.source = source
        self.rank, self.world_size = check_reader(rank, world_size)
        if not _count(epoch):
            raise DatasetError(f"epoch must be a count, not {epoch!r}")
        if epochs is not None and (not _count(epochs)):
            raise DatasetError(f"epochs must be a count or None, not {epochs!r}")
        self.first = epoch
        pos = 0
        if state is not None:
            at, pos = check_state(state, source.identity())
            check_position(pos, source.end(at), at)
            # The same call that saved it (the same epochs, to the same end) goes on to that end: the
            # rest of what it would have read. Other arguments read ``epochs`` from the state's epoch on.
            if not ("until" in state and state["until"] == (None if epochs is None else epoch + epochs)):
                self.first = at
            epoch = at
        self.epochs = epochs
        self.epoch = epoch
        self.position = pos
        self._it: Iterator[tuple[dict, int]] | None = None
        self.views: dict = {}  # column -> the NumPy type its int64 counts are viewed as (datetime64)

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> dict:
        while True:
            if self.epochs is not None and self.epoch >= self.first + self.epochs:
                raise StopIteration
            if self._it is None:
                if self.position >= self.source.end(self.epoch):
                    self._next_epoch()
                    continue
                self._it = self.source.steps(self.epoch, (self.rank, self.world_size), self.position)
            item = next(self._it, None)
            if item is None:
                self._next_epoch()
                continue
            out, pos = item
            if pos is not None:
                self.position = pos
            if self.views:
                out = {k: (v.view(self.views[k]) if k in self.views else v) for k, v in out.items()}
            return out

    def _next_epoch(self) -> None:
        self.close()
        self.epoch += 1
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch comes from (a JSON-able dict)."""
        if getattr(self.source, "resumable", True) is False:
            raise DatasetError("shuffle='buffer' keeps no state", hint="use shuffle=True to resume mid-epoch")
        epoch, pos = self.epoch, self.position
        if pos >= self.source.end(epoch):
            epoch, pos = epoch + 1, 0
        until = None if self.epochs is None else self.first + self.epochs  # where this iterator ends
        return make_state(self.source.identity(), epoch, pos, world_size=self.world_size, rank=self.rank, until=until)

    def close(self) -> None:
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()
        self._it = None


def plan_options(dtype_float16: str, shuffle_buffer: int | None, pad_to: str, pad_value: int | float) -> dict[str, Any]:
    """The options of a plan after its first four (batch size, shuffle, seed, drop_remainder)."""
    return {"dtype_float16": dtype_float16, "shuffle_buffer": shuffle_buffer, "pad_to": pad_to, "pad_value": pad_value}
