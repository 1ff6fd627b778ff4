"""What a ``validate`` run is asked to do (pure: no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from commsched.errors import CommschedError
from commsched.planners import MIN_GAIN_OVER_DDP, STRATEGIES
from commsched.planners.optimal import check_min_gain


@dataclass(frozen=True)
class ValidationConfig:
    """A ``validate`` run: the zoo model and its batch, the strategies, and how much to measure."""

    model: str
    batch_size: int
    image_size: int | None = None
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    rounds: int = 12
    steps: int = 2  # timed steps per variant per round (after two untimed ones of the turn's DDP)
    profile_iters: int = 8  # profile steps before the run (for planning); each round repeats ``steps``
    probe_iters: int = 4  # probes (step 3) before the run; each round repeats one
    resamples: int = 200  # bootstrap resamples for the 95% intervals
    chain_repeats: int = 5  # timed chains per message size in the cost benchmark
    recorded_steps: int = 2  # recorded steps per variant after the rounds
    lr: float = 0.01
    out_dir: str = "out/validate"
    min_gain: float = MIN_GAIN_OVER_DDP  # what the recommendation asks of a plan over stock DDP's buckets
    memory_check: bool = True  # refuse to start a run whose estimated memory does not fit (memory.py)

    def __post_init__(self) -> None:
        check_min_gain(self.min_gain)
        for what in ("batch_size", "rounds", "steps", "profile_iters", "probe_iters", "resamples", "chain_repeats", "recorded_steps"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100_000:
                raise CommschedError(f"validate {what} must be a whole number in [1, 100000], got {v!r}")
        if not isinstance(self.memory_check, bool):
            raise CommschedError(f"validate memory_check must be true or false, got {self.memory_check!r}")
