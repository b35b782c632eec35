"""A run's configuration: everything it is told, checked once and frozen.

Every way a run is configured goes through here: a command fills a RunConfig from its flags,
a campaign cell from its `ab` arguments, a test with the constructor. ``validate()`` checks
what needs no model (each setting on its own and against the device: graph mode, placement,
prefill, compile timeout, faults, lengths against a given ladder) and applies the device's
measured defaults (compile/settings/device_defaults.py), naming the ones it applied; ``for_model()``
settles what needs the model (an auto ladder, a text prompt, the prompt's default length),
checks the rest against it and gives a ``SettledRun``: a concrete ladder, protocol and prefill
plan, every mode chosen. The runner, the compile layer, `generate` and `profile-compile` take
that and check nothing of the user's again: a wrong setting fails here, in one line, and the
flag-only ones before any model is opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.settings.batch_probe import check_batch_compiles
from compile_ahead.runtime.compile.settings.device_defaults import (
    default_decode_compile,
    default_graph,
    default_placement,
)
from compile_ahead.runtime.compile.settings.modes import (
    DEFAULT_COMPILE_TIMEOUT_S,
    DecodeCompile,
    GraphMode,
    PlacementKind,
    PrefillShape,
    choices,
)
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.ladder.settings.batch_bound import check_batch_size
from compile_ahead.runtime.ladder.settings.capacities import (
    DEFAULT_LADDER,
    LADDER_ALIGNMENT,
    Ladder,
)
from compile_ahead.runtime.ladder.settings.faults import Faults
from compile_ahead.runtime.ladder.settings.prefill_plan import (
    PrefillPlan,
    check_prefill_flags,
    choose_prefill,
)
from compile_ahead.runtime.ladder.settings.run_protocol import (
    RunProtocol,
    greedy,
    teacher_forced,
    teacher_forced_text,
)
from compile_ahead.runtime.ladder.settings.schedules import CompileTiming, Schedule

if TYPE_CHECKING:
    from compile_ahead.runtime.sources.base import ModelSource

# The seed's protocol: a 128-token prompt on a 1024-slot first rung. Other ladders keep the
# proportion, so the default prompt always fits.
PROMPT_FRACTION_OF_FIRST_RUNG = 8
DEFAULT_PROMPT_LEN = 128  # the seed's prompt, also for an auto ladder
FITTED_ALIGNMENT = 64  # generate's one rung: a multiple of this
Mode = TypeVar("Mode", bound=StrEnum)


@dataclass(frozen=True)
class AutoLadder:
    """Rungs doubling from the first that holds the prompt up to the model's
    max_position_embeddings, or ``max_context`` (a multiple of 16)."""

    max_context: int | None = None

    def check(self) -> None:
        top = self.max_context
        if top is not None and top > 0 and top % LADDER_ALIGNMENT:
            down = top - top % LADDER_ALIGNMENT
            raise CompileAheadError(
                f"--max-context {top}: the top rung must be a multiple of "
                f"{LADDER_ALIGNMENT}, e.g. {down or LADDER_ALIGNMENT} or {down + LADDER_ALIGNMENT}"
            )

    def resolve(self, max_positions: int, prompt_len: int) -> Ladder:
        top = self.max_context
        if top is not None and not 0 < top <= max_positions:
            raise CompileAheadError(
                f"--max-context must be in 1..{max_positions} (the model's "
                f"max_position_embeddings), got {top}"
            )
        return Ladder.auto(prompt_len, top if top is not None else max_positions)


@dataclass(frozen=True)
class FittedRung:
    """One rung holding the prompt and every token to generate (`generate`): the smallest
    multiple of FITTED_ALIGNMENT that does."""

    def resolve(self, max_positions: int, prompt_len: int, new_tokens: int) -> Ladder:
        need = prompt_len + new_tokens
        if need > max_positions:
            raise CompileAheadError(
                f"prompt ({prompt_len}) + --max-new-tokens ({new_tokens}) = {need} tokens "
                f"exceeds the model's max_position_embeddings ({max_positions})"
            )
        return Ladder((-(-need // FITTED_ALIGNMENT) * FITTED_ALIGNMENT,))


@dataclass(frozen=True)
class Prompt:
    """What a run feeds the model before the model is known: the teacher-forced protocol
    with a prompt of ``length`` tokens (None: 1/8 of the first rung), or greedy generation
    from ``ids`` (as --prompt-ids spells them) or ``text`` (through the model's tokenizer),
    ending at EOS unless ``stop_at_eos`` is off; or, teacher-forced and scored, the tokens of
    a ``document`` (--text FILE's text), its first ``length`` the prompt."""

    length: int | None = None
    ids: str | None = None
    text: str | None = None
    stop_at_eos: bool = True
    chat: bool = False  # the text goes through the model's chat template as a user message
    # Where the prompt was given ("--prompts FILE line 3"), for its refusals; not its identity.
    origin: str | None = field(default=None, compare=False)
    document: str | None = None

    @property
    def greedy(self) -> bool:
        return self.ids is not None or self.text is not None

    def check(self) -> None:
        if self.ids is not None:
            from compile_ahead.runtime.sources.tokenizer import parse_token_ids

            parse_token_ids(self.ids, None, self.origin)  # the ids' spelling, before the model

    def tokens(self, source: ModelSource) -> list[int]:
        """The greedy prompt's ids, checked against the model's vocabulary."""
        from compile_ahead.runtime.sources.tokenizer import encode_prompt, parse_token_ids

        vocab = source.config.vocab_size
        if self.document is not None:  # --text: no ids to fall back on
            if not source.has_tokenizer():
                raise CompileAheadError(
                    f"{self.origin or '--text'}: needs the model's tokenizer, and {source.name} "
                    "has none"
                )
            tokenizer = source.text_tokenizer()
            return encode_prompt(tokenizer, self.document, vocab, source.name, self.origin)
        if self.text is not None and self.chat:
            from compile_ahead.runtime.sources.chat_template import chat_prompt

            return chat_prompt(source, self.text, self.origin)
        if self.text is not None:
            tokenizer = source.text_tokenizer()
            return encode_prompt(tokenizer, self.text, vocab, source.name, self.origin)
        assert self.ids is not None
        return parse_token_ids(self.ids, vocab, self.origin)


def _length(prompt: RunProtocol | Prompt, ids: list[int] | None) -> int:
    """A prompt's length for choosing the ladder: its tokens, or the teacher-forced length
    (DEFAULT_PROMPT_LEN when it has none)."""
    if isinstance(prompt, RunProtocol):
        return len(prompt.prompt)
    if ids is not None and prompt.document is None:
        return len(ids)
    return prompt.length if prompt.length is not None else DEFAULT_PROMPT_LEN


def default_prompt_len(ladder: Ladder) -> int:
    return max(1, ladder.rungs[0] // PROMPT_FRACTION_OF_FIRST_RUNG)


def check_prompt_fits(prompt_len: int, ladder: Ladder) -> None:
    if not 0 < prompt_len < ladder.top:
        raise CompileAheadError(
            f"--prompt-len {prompt_len} must be in 1..{ladder.top - 1} to leave room to decode "
            f"below the top rung ({ladder.top}); e.g. --prompt-len {default_prompt_len(ladder)}"
        )


def _mode(kind: type[Mode], value: object, flag: str) -> Mode | None:
    """``value`` (a mode or its name) as the mode ``kind``; None stays None: the device's
    default."""
    if value is None:
        return None
    try:
        return kind(str(value))
    except ValueError:
        raise CompileAheadError(
            f"{flag} must be one of {', '.join(choices(kind))}, got {value!r}"
        ) from None


@dataclass(frozen=True)
class RunConfig:
    # None: no ladder run (profile-compile without --schedule only compiles rungs).
    schedule: Schedule | None
    ladder: Ladder | AutoLadder | FittedRung = field(default_factory=lambda: Ladder(DEFAULT_LADDER))
    # What the run feeds its B >= 1 sequences, one each: a protocol, or a Prompt that
    # for_model makes one of. One prompt (not in a tuple) is a batch of one.
    prompts: tuple[RunProtocol | Prompt, ...] = (Prompt(),)
    # Decode steps (greedy: tokens after the prompt's own at most); None: up to the top rung.
    decode_tokens: int | None = None
    options: CompileOptions = field(default_factory=CompileOptions)
    graph: GraphMode | None = None  # None: the device's measured default
    placement: PlacementKind | None = None  # where background compiles run; None: the device's
    # With a prefill graph, when the first rungs compile; None: the device's default.
    decode_compile: DecodeCompile | None = None
    # None: chosen per device from the prompt length (settings/prefill_plan.py); 1: token by
    # token on the first rung's decode graph; >1: a prefill graph taking that many tokens per
    # call.
    prefill_chunk: int | None = None
    prefill_shape: PrefillShape | None = None  # None: the device's default
    compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S  # a worker's compile is killed after it
    faults: Faults = field(default_factory=Faults)
    boundary_window: int = 3  # steps recorded on each side of a boundary
    keep_logits: bool = False  # keep every step's logits (tests on tiny models)
    # Keep the logits of the boundary windows' steps, recording windows around every rung of
    # the ladder whatever the schedule compiles (a benchmark's cosine against a b0 control).
    keep_window_logits: bool = False
    counter_every: int = 16  # decode steps between counter samples (RSS, tok/s)
    # When the command started (now_ns()): first_token_s counts from there; None: the run's.
    started_ns: int | None = None
    # Set by validate():
    device_defaults: tuple[str, ...] = ()  # the settings the device's measured defaults chose
    validated: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.prompts, RunProtocol | Prompt):
            object.__setattr__(self, "prompts", (self.prompts,))
        elif not isinstance(self.prompts, tuple):
            object.__setattr__(self, "prompts", tuple(self.prompts))

    @property
    def batch(self) -> int:
        """B: one sequence per prompt."""
        return len(self.prompts)

    # -- before the model ------------------------------------------------------------------
    def validate(self) -> RunConfig:
        """Every setting that needs no model checked, the device's defaults applied."""
        if self.validated:
            return self
        options = self.options.resolved()
        device = options.device
        graph = _mode(GraphMode, self.graph, "--graph")
        placement = _mode(PlacementKind, self.placement, "--compile-placement")
        decode_compile = _mode(DecodeCompile, self.decode_compile, "--decode-compile")
        given = {"graph": graph, "placement": placement, "decode_compile": decode_compile}
        config = replace(
            self,
            options=options,
            prefill_shape=_mode(PrefillShape, self.prefill_shape, "--prefill-shape"),
            device_defaults=tuple(k for k, v in given.items() if v is None),
            validated=True,
            graph=graph if graph is not None else default_graph(device),
            placement=placement if placement is not None else default_placement(device),
            decode_compile=(
                decode_compile if decode_compile is not None else default_decode_compile(device)
            ),
        )
        config._check_flags()
        return config

    def _check_flags(self) -> None:
        if not 0 < self.compile_timeout_s < float("inf"):
            raise CompileAheadError(
                f"--compile-timeout must be a positive number of seconds, got "
                f"{self.compile_timeout_s}"
            )
        if self.boundary_window < 0:
            raise CompileAheadError("--boundary-window must be >= 0")
        self.faults.check()
        check_batch_size(self.batch, "the prompts given" if self.batch > 1 else "--batch")
        split = self.graph == GraphMode.SPLIT
        check_prefill_flags(self.options.device, self.prefill_chunk, self.prefill_shape, not split)
        self._check_lengths()
        if self.faults.worker_faults:
            self._check_worker_faults()
        if self.batch > 1:
            check_batch_compiles(self.options, self.batch)  # the device itself, before any rung

    def _check_lengths(self) -> None:
        if isinstance(self.ladder, AutoLadder):
            self.ladder.check()
        elif isinstance(self.ladder, Ladder):
            self.ladder.validate()
            self.faults.check_rungs(self.ladder)
        for prompt in self.prompts:
            if isinstance(prompt, Prompt):
                prompt.check()
                if prompt.length is not None and isinstance(self.ladder, Ladder):
                    check_prompt_fits(prompt.length, self.ladder)
        if isinstance(self.ladder, FittedRung):
            if self.decode_tokens is None or self.decode_tokens < 0:
                new = None if self.decode_tokens is None else self.decode_tokens + 1
                raise CompileAheadError(f"--max-new-tokens must be positive, got {new}")
        elif self.decode_tokens is not None and self.decode_tokens <= 0:
            raise CompileAheadError(f"--decode-tokens must be positive, got {self.decode_tokens}")

    def _check_worker_faults(self) -> None:
        """--inject-worker-fault only where a worker compiles: refused where it could never
        fire (the rung check needs the prompt's length: for_model)."""
        if self.placement != PlacementKind.WORKER:
            raise CompileAheadError(
                "--inject-worker-fault needs --compile-placement worker: in-process compiles have "
                "no worker to fault"
            )
        if self.schedule is not None and self.schedule.compile is not CompileTiming.ONE_AHEAD:
            raise CompileAheadError(
                f"--inject-worker-fault: schedule {self.schedule.name} compiles every rung in "
                "the foreground before decoding; only one-ahead schedules (i2, i3) use the worker"
            )

    # -- against the model -------------------------------------------------------------------
    def for_model(self, source: ModelSource) -> SettledRun:
        """The ladder and each sequence's protocol this model makes of the settings, checked
        against it, and the prefill the longest prompt gets: what a run takes. With a prefill
        graph each sequence's prompt runs on that batch-1 graph in turn; with chunk 1 token
        by token through the decode graph."""
        config = self.validate()
        if config.schedule is None:
            raise TypeError("only a configuration with a schedule settles into a run")
        config.check_graph_mode(source)
        ladder, sequences = config._settle_sequences(source)
        longest = max(sequences, key=lambda seq: len(seq.prompt))
        first = next(r for r in ladder.rungs if r >= len(longest.prompt) + 1)
        config._check_faults_on(ladder, first)
        prefill = choose_prefill(
            config.options.device,
            len(longest.prompt),
            first,
            config.prefill_chunk,
            config.prefill_shape,
            graph_available=config.graph != GraphMode.SPLIT,
        )
        return SettledRun.settle(config, config.schedule, ladder, longest, prefill, sequences)

    def _settle_sequences(self, source: ModelSource) -> tuple[Ladder, tuple[RunProtocol, ...]]:
        """The ladder (from the longest prompt; DEFAULT_PROMPT_LEN for a prompt of no length)
        and each sequence's protocol: its prompt (1/8 of the first rung when it has no
        length), its own token limit (--decode-tokens, else up to the top rung) and, greedy,
        the model's EOS. Equal prompts make one protocol, each text encoded once."""
        made: dict[RunProtocol | Prompt, tuple[int, list[int] | None]] = {}
        for prompt in self.prompts:
            if prompt not in made:
                ids = (
                    prompt.tokens(source)
                    if isinstance(prompt, Prompt) and (prompt.greedy or prompt.document is not None)
                    else None
                )
                made[prompt] = (_length(prompt, ids), ids)
        longest = max(length for length, _ in made.values())
        # A protocol given whole says its own token limit (generate's one fitted rung).
        given = next((p for p in made if isinstance(p, RunProtocol)), None)
        ladder = self._ladder_for(source.config.max_position_embeddings, longest, given)
        protocols = {p: self._protocol(source, p, ids, ladder) for p, (_, ids) in made.items()}
        sequences = tuple(protocols[p] for p in self.prompts)
        for i, seq in enumerate(sequences):
            if len(seq.prompt) + 1 > ladder.top:
                which = f"of sequence {i} " if len(sequences) > 1 else ""
                raise CompileAheadError(
                    f"the prompt {which}({len(seq.prompt)} tokens) does not fit the top rung "
                    f"({ladder.top}) with room to decode"
                )
        return ladder, sequences

    def _protocol(
        self,
        source: ModelSource,
        prompt: RunProtocol | Prompt,
        ids: list[int] | None,
        ladder: Ladder,
    ) -> RunProtocol:
        if isinstance(prompt, RunProtocol):
            return prompt
        tokens = self.decode_tokens
        if ids is not None and prompt.document is not None:  # teacher-forced text
            length = prompt.length if prompt.length is not None else default_prompt_len(ladder)
            check_prompt_fits(length, ladder)
            return teacher_forced_text(ids, length, tokens, ladder.top, prompt.origin or "--text")
        if ids is not None:  # greedy
            if tokens is None:
                tokens = max(0, ladder.top - len(ids))  # a prompt over the top is refused
            eos = source.config.eos_token_ids if prompt.stop_at_eos else ()
            return greedy(ids, tokens, eos)
        length = prompt.length if prompt.length is not None else default_prompt_len(ladder)
        check_prompt_fits(length, ladder)
        if tokens is None:
            tokens = ladder.top - length
        return teacher_forced(source.config.vocab_size, length, tokens)

    def _check_faults_on(self, ladder: Ladder, first: int) -> None:
        """The fault flags against the settled ladder, at any B: each names a rung of it,
        and a worker fault only a rung the worker compiles (those after ``first``, the first
        rung used, which compiles in the foreground)."""
        self.faults.check_rungs(ladder)
        early = sorted(c for c in self.faults.worker_faults if c <= first)
        if early:
            raise CompileAheadError(
                f"--inject-worker-fault {early[0]}: the worker compiles only the rungs after "
                f"the first one used ({first}, compiled in the foreground before decoding)"
            )

    def check_graph_mode(self, source: ModelSource) -> None:
        """The graph mode against how the source makes its graphs: split graphs only of a
        model they can be cut from (an IR's attention the cut takes)."""
        if self.graph == GraphMode.SPLIT:
            source.check_split()

    def _ladder_for(
        self, max_positions: int, prompt_len: int, protocol: RunProtocol | None = None
    ) -> Ladder:
        ladder = self.ladder
        if isinstance(ladder, AutoLadder):
            return ladder.resolve(max_positions, prompt_len)
        if isinstance(ladder, FittedRung):
            tokens = protocol.decode_tokens if protocol is not None else self.decode_tokens
            assert tokens is not None
            return ladder.resolve(max_positions, prompt_len, tokens + 1)
        if ladder.top > max_positions:
            raise CompileAheadError(
                f"--ladder {ladder}: the top rung {ladder.top} exceeds the model's "
                f"max_position_embeddings ({max_positions})"
            )
        return ladder


@dataclass(frozen=True)
class SettledRun:
    """A RunConfig settled for one model (RunConfig.for_model): what a run takes. Every choice
    is made: the ladder, the protocol and the prefill plan are concrete, the device's defaults
    are applied, and everything was checked; nothing is left for the runner to narrow."""

    schedule: Schedule
    ladder: Ladder
    protocol: RunProtocol
    prefill: PrefillPlan
    options: CompileOptions  # resolved
    graph: GraphMode
    placement: PlacementKind
    decode_compile: DecodeCompile
    compile_timeout_s: float
    faults: Faults
    boundary_window: int
    keep_logits: bool
    counter_every: int
    started_ns: int | None  # None: the run's own start
    device_defaults: tuple[str, ...]  # the settings the device's measured defaults chose
    # The run's B >= 1 sequences, each with its own protocol (``protocol`` is the longest
    # one's, whose prompt the prefill plan and the report's prompt length are of).
    sequences: tuple[RunProtocol, ...] = ()
    keep_window_logits: bool = False

    ready = True  # what a run takes (a RunConfig is not)

    @property
    def batch(self) -> int:
        return len(self.sequences)

    @classmethod
    def settle(
        cls,
        config: RunConfig,
        schedule: Schedule,
        ladder: Ladder,
        protocol: RunProtocol,
        prefill: PrefillPlan,
        sequences: tuple[RunProtocol, ...] = (),
    ) -> SettledRun:
        """``config`` (validated: its modes are chosen) with what the model made of it."""
        assert config.validated and config.graph is not None and config.placement is not None
        assert config.decode_compile is not None
        return cls(
            schedule,
            ladder,
            protocol,
            prefill,
            config.options,
            config.graph,
            config.placement,
            config.decode_compile,
            config.compile_timeout_s,
            config.faults,
            config.boundary_window,
            config.keep_logits,
            config.counter_every,
            config.started_ns,
            config.device_defaults,
            sequences or (protocol,),
            config.keep_window_logits,
        )
