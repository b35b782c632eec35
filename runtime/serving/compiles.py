"""Which buckets are compiled, and the compiles themselves: before serving, on the request
path (requests wait) or in the background (one at a time), all kept within a memory budget by
releasing the least recently used bucket that nothing needs now.

The budget bounds the compiled buckets' graphs (Executor.bucket_bytes), the one compiling
included; the live KV is not in it (it moves with the requests, whatever the bucket). Every
bucket of the grid must fit the budget alone, or the grid is refused before serving.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.executor import COMPILE, Executor
from compile_ahead.runtime.serving.metrics import EngineStats
from compile_ahead.runtime.serving.policies import CompilePolicy, Forecast


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


class Compiles:
    def __init__(
        self,
        grid: Grid,
        executor: Executor,
        policy: CompilePolicy,
        stats: EngineStats,
        budget_bytes: int | None = None,
    ) -> None:
        self.grid = grid
        self.executor = executor
        self.policy = policy
        self.stats = stats
        self.budget = budget_bytes
        self.resident: OrderedDict[Bucket, None] = OrderedDict()  # least recently used first
        self.compiling: Bucket | None = None
        self.last_used: dict[Bucket, float] = {}
        self.compile_seconds: dict[Bucket, float] = {}  # each bucket's last compile
        self._compiling_since = 0.0
        # The device's work beside the background compile, per activity: summed once the
        # compile is known to outlast it, the spans since the last poll kept apart (the compile
        # may end inside one).
        self._beside: dict[str, float] = {}
        self._since_poll: list[tuple[float, float, str]] = []
        self.check_budget()

    def check_budget(self) -> None:
        """Refuse a budget that cannot hold a bucket of the grid alone, in one line."""
        if self.budget is None:
            return
        biggest = max(self.grid, key=self.executor.bucket_bytes)
        size = self.executor.bucket_bytes(biggest)
        if size > self.budget:
            raise CompileAheadError(
                f"the memory budget ({gib(self.budget)}) cannot hold the bucket {biggest} "
                f"({gib(size)}); raise --memory-budget or shrink --buckets/--ladder"
            )

    @property
    def compiled(self) -> frozenset[Bucket]:
        return frozenset(self.resident)

    def touch(self, bucket: Bucket) -> None:
        self.resident.move_to_end(bucket)
        self.last_used[bucket] = self.executor.clock.now()

    def recent_compile_s(self) -> float:
        """The last compile's seconds (0 before any): what the policy expects the next to take."""
        return self.stats.compiles[-1]["seconds"] if self.stats.compiles else 0.0

    def resident_bytes(self) -> int:
        held = [*self.resident, *([self.compiling] if self.compiling else [])]
        return sum(self.executor.bucket_bytes(b) for b in held)

    def before_serving(self) -> None:
        """The policy's warm-up: every bucket it names, compiled before a request is taken."""
        wanted = self.policy.before_serving(self.grid)
        if self.budget is not None:
            total = sum(self.executor.bucket_bytes(b) for b in wanted)
            if total > self.budget:
                raise CompileAheadError(
                    f"the {self.policy.name} policy compiles {len(wanted)} buckets "
                    f"({gib(total)}) before serving, over the memory budget "
                    f"({gib(self.budget)}); raise --memory-budget or shrink the grid"
                )
        for bucket in wanted:
            if bucket not in self.resident:
                self._compile_now(bucket, "before-serving")

    def worked(self, start: float, end: float, activity: str) -> None:
        """The device worked from ``start`` to ``end`` at ``activity`` (``activity_key``): the
        background compile, if one runs, shared the host with it."""
        if self.compiling is not None:
            self._since_poll.append((start, end, activity))

    def _fold(self, until: float | None = None) -> None:
        """Add the spans since the last poll to the compile's sums, each cut at ``until``."""
        start = self._compiling_since
        for t0, t1, activity in self._since_poll:
            cut = t1 if until is None else min(t1, until)
            self._beside[activity] = self._beside.get(activity, 0.0) + max(cut - max(t0, start), 0)
        self._since_poll.clear()

    def poll(self) -> Bucket | None:
        """Take in the background compile once finished; the bucket it made, if any."""
        if self.compiling is None:
            return None
        done = self.executor.finished_compile()
        if done is None:  # still running: every span so far lay inside it
            self._fold()
            return None
        bucket, seconds = done
        start = self._compiling_since
        self._fold(until=start + seconds)
        beside = {k: v for k, v in sorted(self._beside.items()) if v > 0}
        self.compiling = None
        self.stats.compile_background_s += seconds
        self._compiled(bucket, seconds, "background", start, beside)
        return bucket

    def maybe_background(self, forecast: Forecast, keep: Collection[Bucket | None]) -> None:
        """Start the policy's most urgent background compile that fits, if none is running."""
        if self.compiling is not None:
            return
        for bucket in self.policy.in_background(forecast):
            if bucket in self.resident or bucket not in self.grid:
                continue
            if self._make_room(bucket, keep, background=True):
                self.compiling = bucket
                self._compiling_since = self.executor.clock.now()
                self._beside, self._since_poll = {}, []
                self.executor.start_compile(bucket)
            return  # the most urgent only: a later one is not worth the memory yet

    def on_request_path(self, bucket: Bucket, required: Bucket | None = None) -> None:
        """Make ``bucket`` compiled while requests wait: by waiting for the background compile
        when it holds ``required`` (what must exist for anything to go on; default the bucket
        itself), else by compiling the bucket now."""
        clock = self.executor.clock
        if self.compiling is not None and self.compiling.holds(*(required or bucket)):
            t0 = clock.now()
            while self.poll() is None:
                self.executor.wait(None)
            self.stats.compile_waited_s += clock.now() - t0
            return
        if not self._make_room(bucket, keep=()):
            while self.compiling is not None:  # the background compile holds the memory
                self.executor.wait(None)
                self.poll()
            if not self._make_room(bucket, keep=()):
                raise CompileAheadError(f"the memory budget cannot hold the bucket {bucket}")
        self._compile_now(bucket, "request-path")

    def _compile_now(self, bucket: Bucket, where: str) -> None:
        start = self.executor.clock.now()
        self._make_room(bucket, keep=())
        seconds = self.executor.compile(bucket)
        self.worked(start, self.executor.clock.now(), COMPILE)
        if where == "request-path":
            self.stats.compile_request_path_s += seconds
        else:
            self.stats.compile_before_serving_s += seconds
        self._compiled(bucket, seconds, where, start)

    def _compiled(
        self,
        bucket: Bucket,
        seconds: float,
        where: str,
        start: float,
        beside: dict[str, float] | None = None,
    ) -> None:
        """Record a compile; ``beside``: for one in the background, the seconds of it during
        which the device worked beside it, per activity (the rest it had the host to itself)."""
        self.resident[bucket] = None
        self.compile_seconds[bucket] = seconds
        self.last_used[bucket] = self.executor.clock.now()
        self.stats.buckets_compiled.add(bucket)
        record = {"bucket": list(bucket), "where": where, "start_s": start, "seconds": seconds}
        if beside is not None:
            record["busy_s"] = min(sum(beside.values()), seconds)
            record["beside_s"] = beside
        self.stats.compiles.append(record)
        if self.stats.ready_s is None:
            self.stats.ready_s = self.executor.clock.now()
        self.stats.peak_resident_bucket_bytes = max(
            self.stats.peak_resident_bucket_bytes, self.resident_bytes()
        )

    def _make_room(
        self, bucket: Bucket, keep: Collection[Bucket | None], background: bool = False
    ) -> bool:
        """Release least recently used buckets (never one in ``keep``) until ``bucket`` fits
        the budget beside the rest; whether it does. For a background compile, a bucket is
        released only once it has been idle longer than compiling it again takes, so
        predictions that come and go do not release and recompile the same buckets."""
        if self.budget is None:
            return True
        need = self.executor.bucket_bytes(bucket)
        now = self.executor.clock.now()
        for victim in list(self.resident):
            if self.resident_bytes() + need <= self.budget:
                break
            idle = now - self.last_used.get(victim, 0.0)
            if victim in keep or (background and idle < self.compile_seconds.get(victim, 0.0)):
                continue
            del self.resident[victim]
            self.executor.release(victim)
            self.stats.buckets_released.append(victim)
        return self.resident_bytes() + need <= self.budget
