"""Mixtures: several datasets read as one stream, a deterministic weighted interleave of their rows.

``open_dataset([a, b, c], weights=[0.5, 0.3, 0.2], seed=7)``. Position ``x`` of the stream takes its
row from one member, its *label*; the labels are a pure function of (seed, position):

* The stream is cut into chunks of :data:`MIX_CHUNK` positions. How many rows of each member the
  first ``x = c * MIX_CHUNK`` positions hold is fixed by rounding the weights down a binary tree of
  the members (each node splits its count between its two halves in proportion to their weights,
  rounded to the nearest): exact to within a row or two at every chunk boundary, and never
  decreasing as ``x`` grows.
* Within a chunk, its labels are put in a random order drawn from (seed, chunk).

So the rows member ``k`` gave before any position are known without reading anything: a mixture
resumes like a dataset. Member ``k`` gives its rows in its own order (its own epoch order, shuffled
with a seed derived from the loader's ``seed`` and ``k``).

When a member runs out: ``exhausted="stop"`` ends the mixture's epoch just before the first position
that would need a row it does not have (every epoch draws its own labels, and every member starts
its epoch again); ``"cycle"`` starts the member's next epoch (a new order), and a mixture's epoch is
then the stream up to where every member has given all its rows at least once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import DatasetError
from .order import ALL, Cursor
from .source import Batches

MIX_CHUNK = 1024
EXHAUSTED = ("stop", "cycle")


class Mixture(Batches):
    """Several datasets of the same columns, read as one weighted interleave (see the module)."""

    def __init__(self, members: list, weights: list[float] | None, *, seed: int | None, exhausted: str) -> None:
        if not members:
            raise DatasetError("a mixture needs at least one dataset")
        if exhausted not in EXHAUSTED:
            raise DatasetError(f"exhausted={exhausted!r}: use 'stop' or 'cycle'")
        if weights is None:
            weights = [float(len(m)) for m in members]
        if len(weights) != len(members):
            raise DatasetError(
                f"{len(weights)} weights for {len(members)} datasets", hint="give one weight per dataset"
            )
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
                raise DatasetError(f"weight {w!r} is not a positive number", hint="weights are positive numbers")
        first = members[0]
        for m in members:
            if m.bucketed:
                raise DatasetError(f"{m.path}: a bucketed dataset cannot be mixed", hint="mix datasets of plain rows")
            if not len(m):
                raise DatasetError(f"{m.path}: has no rows to mix")
            if m.columns != first.columns:
                raise DatasetError(
                    f"{m.path}: columns {', '.join(m.columns)}; {first.path} has {', '.join(first.columns)}",
                    hint="a mixture needs the same columns (select them with columns=)",
                )
            for f in m.schema:
                other = first.schema[f.name]
                if f.describe() != other.describe():
                    raise DatasetError(
                        f"{m.path}: column '{f.name}' is {f.describe()}, in {first.path} it is {other.describe()}",
                        hint="a mixture needs columns of the same types",
                    )
        total = float(sum(weights))
        self.members = list(members)
        self.weights = [float(w) / total for w in weights]
        self.seed = 0 if seed is None else int(seed)  # the interleave is the same in every process
        self.exhausted = exhausted
        self.sizes = [len(m) for m in members]
        self._ends: dict[int, int] = {}
        self._chunks: dict[tuple, np.ndarray] = {}

    # -- what it is ---------------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        return self.members[0].columns

    @property
    def schema(self):
        return self.members[0].schema

    def __len__(self) -> int:
        """Rows of one epoch of the mixture (epoch 0 for ``exhausted="stop"``)."""
        return self.end(0)

    def __repr__(self) -> str:
        parts = ", ".join(f"{m.path!r} x {w:.3g}" for m, w in zip(self.members, self.weights, strict=True))
        return f"<lovecraft Mixture of {parts}; {self.exhausted}>"

    # -- the labels ---------------------------------------------------------------------------

    def cum_counts(self, x: int) -> np.ndarray:
        """Rows of each member among the first ``x`` positions at a chunk boundary (the tree rounding)."""
        out = np.zeros(len(self.weights), dtype=np.int64)
        w = self.weights

        def split(lo: int, hi: int, total: int) -> None:
            if hi - lo == 1:
                out[lo] = total
                return
            mid = (lo + hi) // 2
            left_w, right_w = sum(w[lo:mid]), sum(w[mid:hi])
            left = int(math.floor(total * (left_w / (left_w + right_w)) + 0.5))
            split(lo, mid, left)
            split(mid, hi, total - left)

        split(0, len(w), int(x))
        return out

    def _key(self, epoch: int) -> tuple:
        return (self.seed, 1, epoch) if self.exhausted == "stop" else (self.seed, 2)

    def labels(self, epoch: int, c: int) -> np.ndarray:
        """The member of every position of chunk ``c`` (stream coordinates)."""
        key = (epoch if self.exhausted == "stop" else -1, c)
        got = self._chunks.get(key)
        if got is None:
            n = self.cum_counts((c + 1) * MIX_CHUNK) - self.cum_counts(c * MIX_CHUNK)
            got = np.repeat(np.arange(len(n), dtype=np.int64), n)
            np.random.default_rng([*self._key(epoch), c]).shuffle(got)
            self._chunks[key] = got
            while len(self._chunks) > 8:
                self._chunks.pop(next(iter(self._chunks)))
        return got

    def before(self, epoch: int, x: int) -> np.ndarray:
        """Rows of each member among the stream's first ``x`` positions."""
        c, r = divmod(int(x), MIX_CHUNK)
        out = self.cum_counts(c * MIX_CHUNK)
        if r:
            out += np.bincount(self.labels(epoch, c)[:r], minlength=len(out))
        return out

    def span(self, epoch: int, lo: int, hi: int) -> np.ndarray:
        """The labels of stream positions ``[lo, hi)``."""
        pieces = []
        while lo < hi:
            c, r = divmod(lo, MIX_CHUNK)
            take = min(hi - lo, MIX_CHUNK - r)
            pieces.append(self.labels(epoch, c)[r : r + take])
            lo += take
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)

    def _occurrence(self, epoch: int, k: int, n: int) -> int:
        """The stream position of member ``k``'s row ``n`` (0-based): of its ``n+1``-th label."""
        lo, hi = 0, 1
        while self.cum_counts(hi * MIX_CHUNK)[k] <= n:
            lo, hi = hi, hi * 2
        while lo < hi:  # the first chunk whose end holds more than n rows of k
            mid = (lo + hi) // 2
            if self.cum_counts((mid + 1) * MIX_CHUNK)[k] > n:
                hi = mid
            else:
                lo = mid + 1
        have = int(self.cum_counts(lo * MIX_CHUNK)[k])
        at = np.flatnonzero(self.labels(epoch, lo) == k)[n - have]
        return lo * MIX_CHUNK + int(at)

    def end(self, epoch: int) -> int:
        """Positions of epoch ``epoch``: to the first that needs a row a member does not have
        ("stop"), or to where every member has given all its rows ("cycle")."""
        e = epoch if self.exhausted == "stop" else 0
        got = self._ends.get(e)
        if got is None:
            if self.exhausted == "stop":
                got = min(self._occurrence(e, k, n) for k, n in enumerate(self.sizes))
            else:
                got = max(self._occurrence(e, k, n - 1) for k, n in enumerate(self.sizes)) + 1
            self._ends[e] = got
        return got

    # -- reading ------------------------------------------------------------------------------

    def plan(self, batch_size: int, *args: Any, **kwargs: Any) -> MixPlan:
        """The batching options, as :meth:`Dataset.plan` (``shuffle``/``seed`` shuffle each member's
        rows; the interleave is the mixture's own, seeded when it was opened)."""
        return MixPlan(self, batch_size, *args, **kwargs)

    def num_batches(self, batch_size: int, drop_remainder: bool = False, epoch: int = 0) -> int:
        n = self.end(epoch)
        return n // batch_size if drop_remainder else -(-n // batch_size)


class MixPlan:
    """A mixture's batching options: the source of a :class:`~.state.BatchIterator`."""

    unit = "rows"
    resumable = True
    bucketed = False

    def __init__(
        self,
        mix: Mixture,
        batch_size: int,
        shuffle: bool | str = False,
        seed: int | None = None,
        drop_remainder: bool = False,
        **member: Any,
    ) -> None:
        """``member``: the rest of :meth:`Dataset.plan`'s options, given to each member's plan."""
        self._args = (batch_size, shuffle, drop_remainder, member)
        if shuffle and seed is None:
            seed = int(np.random.SeedSequence().entropy % (1 << 63))
        self.mix = mix
        self.seed = seed if shuffle else None
        self.plans = []
        for k, m in enumerate(mix.members):
            sk = None if not shuffle else int(np.random.default_rng([seed, 7, k]).integers(1 << 62))
            self.plans.append(m.plan(batch_size, shuffle, sk, False, **member))
        if any(p.mode == "buffer" for p in self.plans):
            raise DatasetError("shuffle='buffer' cannot be mixed", hint="use shuffle=True")
        first = self.plans[0]
        self.batch_size, self.mode, self.float32, self.pad_value = (
            first.batch_size,
            first.mode,
            first.float32,
            first.pad_value,
        )
        self.drop_remainder = bool(drop_remainder)

    def with_seed(self, seed: int | None) -> MixPlan:
        """The same options with another seed (a loader adopting the seed of a saved state)."""
        bs, shuffle, drop, member = self._args
        return MixPlan(self.mix, bs, shuffle, seed, drop, **member)

    def identity(self) -> dict[str, Any]:
        m = self.mix
        return {
            "datasets": [p.ds.fingerprint for p in self.plans],
            "weights": [round(w, 12) for w in m.weights],
            "mix_seed": m.seed,
            "exhausted": m.exhausted,
            "shuffle": [p.mode or False for p in self.plans],
            "seed": self.seed,
            "batch_size": self.batch_size,
            "drop_remainder": self.drop_remainder,
            "window": [p.shuffle_buffer if p.mode == "blocks" else None for p in self.plans],
            "unit": self.unit,
        }

    def end(self, epoch: int = 0) -> int:
        return self.mix.end(epoch)

    def nbatches(self, rows: int) -> int:
        bs = self.batch_size
        return max(0, rows // bs if self.drop_remainder else -(-rows // bs))

    def count(self, epoch: int = 0, workers: int = 1, worker: int | None = None, start: int = 0) -> int:
        ws = range(workers) if worker is None else [worker]
        m = self.nbatches(self.end(epoch) - start)
        return sum(len(range(w, m, workers)) for w in ws)

    def epoch(self, epoch: int, worker: tuple[int, int] = (0, 1)) -> Iterator[dict]:
        for out, _ in self.steps(epoch, worker, 0):
            yield out

    def steps(self, epoch: int, reader: tuple[int, int] = (0, 1), start: int = 0) -> Iterator[tuple[dict, int]]:
        j, n = reader
        if not 0 <= j < n:
            raise DatasetError(f"worker {j} of {n} does not exist")
        mix, bs = self.mix, self.batch_size
        end = mix.end(epoch)
        base = 0 if mix.exhausted == "stop" else epoch * end
        steps = self.nbatches(end - start)
        reading = _Members(self, epoch)
        try:
            for k in range(j, steps, n):
                lo = start + k * bs
                hi = min(end, lo + bs)
                labels = mix.span(epoch, base + lo, base + hi)
                have = mix.before(epoch, base + lo)
                pieces = []
                for m in np.unique(labels).tolist():
                    pos = np.flatnonzero(labels == m)
                    q = int(have[m])
                    pieces.append((reading.rows(m, q, q + len(pos)), pos))
                yield combine(pieces, hi - lo, self.pad_value), min(end, start + (k - j + n) * bs)
        finally:
            reading.close()


class _Members:
    """Cursors over each member's order, by the member's position in the stream ("cycle": across
    its epochs, each a new order)."""

    def __init__(self, plan: MixPlan, epoch: int) -> None:
        self.plan, self.epoch = plan, epoch
        self.cursors: dict[int, tuple[int, Cursor]] = {}

    def rows(self, k: int, lo: int, hi: int) -> dict:
        p = self.plan.plans[k]
        n = len(p.ds)
        g = p.ds.groups[0]
        outs = []
        while lo < hi:
            e, a = divmod(lo, n) if self.plan.mix.exhausted == "cycle" else (self.epoch, lo)
            b = min(a + hi - lo, n)
            have = self.cursors.get(k)
            if have is None or have[0] != e:
                if have is not None:
                    have[1].close()
                have = self.cursors[k] = (e, p.cursor(g, e, ALL, background=True))
            outs.append(p.emit(g, have[1].rows(a, b)))
            lo += b - a
        if len(outs) == 1:
            return outs[0]
        return combine([(o, None) for o in outs], None, self.plan.pad_value)

    def close(self) -> None:
        for _, c in self.cursors.values():
            c.close()
        self.cursors = {}


def combine(pieces: list[tuple[dict, np.ndarray | None]], n: int | None, pad_value) -> dict:
    """Output batches as one: rows of piece ``i`` at positions ``pieces[i][1]`` (None: the pieces
    one after the other). Sequence columns are padded to the longest."""
    if len(pieces) == 1 and (pieces[0][1] is None or np.array_equal(pieces[0][1], np.arange(n))):
        return pieces[0][0]
    if n is None:
        sizes = [len(next(iter(d.values()))) for d, _ in pieces]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        pieces = [(d, np.arange(starts[i], starts[i + 1])) for i, (d, _) in enumerate(pieces)]
        n = int(starts[-1])
    out = {}
    for key in pieces[0][0]:
        arrs = [np.asarray(d[key]) if not isinstance(d[key], np.ndarray) else d[key] for d, _ in pieces]
        if arrs[0].ndim >= 2 and len({a.shape[1:] for a in arrs}) > 1:
            width = max(a.shape[1] for a in arrs)
            arrs = [_pad(a, width, pad_value) for a in arrs]
        dtype = np.result_type(*arrs) if all(a.dtype != object for a in arrs) else np.dtype(object)
        res = np.empty((n, *arrs[0].shape[1:]), dtype=dtype)
        for a, (_, pos) in zip(arrs, pieces, strict=True):
            res[pos] = a
        out[key] = res
    return out


def _pad(a: np.ndarray, width: int, value) -> np.ndarray:
    if a.shape[1] == width:
        return a
    out = np.full((a.shape[0], width, *a.shape[2:]), value, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out
