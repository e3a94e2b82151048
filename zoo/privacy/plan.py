"""A DP-SGD run's plan, made from the config before any JAX work: sampling rate, noise, the steps the budget
allows, batch rows, and what results.json reports."""
import logging
import math
from dataclasses import dataclass
from typing import Optional

from flax import nnx

from zoo.errors import UserError
from zoo.optim import no_periodic_eval
from zoo.privacy.gradients import make_private_gradients
from zoo.privacy.sampling import PoissonStream, chunk_bounds, max_batch_size

log = logging.getLogger("zoo")

OVERFLOW_SHARE = 0.01  # of delta, left for a Poisson sample that does not fit the fixed batch rows
# Beyond this epsilon (e^10 ~ 2e4) the guarantee bounds little, and paying the overflow term from delta would grow
# the rows with epsilon (digits, 64 expected examples: 123 rows at 3, 150 at 25, 216 at 100) until e^epsilon
# overflows; the reported delta then carries the term instead.
MEANINGLESS_EPSILON = 10.0


@dataclass(frozen=True)
class PrivacyPlan:
    q: float  # Poisson sampling rate: batch_size / train examples
    noise_multiplier: float
    l2_clip: float
    delta: float  # the run's total delta: accountant_delta + the overflow term
    accountant_delta: float
    overflow_probability: float  # that any step sampled more than `rows` examples
    rows: int  # a sample is truncated at these rows; padded with mask 0 to them (and to split across devices)
    total_steps: int
    planned_steps: int  # from trainer.epochs / max_steps; more than total_steps when the budget stops the run
    target_epsilon: Optional[float]
    accountant: str
    stream: PoissonStream
    summary: str = ""  # the plan's log line, said once the run is known to train (zoo.outputs.open_outputs)

    def epsilon(self, steps: int) -> float:
        from zoo.privacy import accountant as acc

        return acc.epsilon(self.q, self.noise_multiplier, steps, self.accountant_delta, self.accountant)

    def record(self, steps: int) -> dict:
        """results.json's `privacy`: enough to recompute epsilon with dp-accounting."""
        eps = self.epsilon(steps)
        return {"epsilon": eps if math.isfinite(eps) else None, "delta": self.delta,
                "noise_multiplier": self.noise_multiplier, "l2_clip": self.l2_clip,
                "sampling": f"poisson (q={self.q:.6g}, expected batch {self.stream.batch_size}, "
                            f"truncated at {self.rows})",
                "accountant": self.accountant,
                "q": self.q, "steps": steps, "accountant_delta": self.accountant_delta,
                "overflow_probability": self.overflow_probability, "target_epsilon": self.target_epsilon,
                "stopped_by_budget": self.total_steps < self.planned_steps}

    def gradients(self, model: nnx.Module, graphdef, task, axis_name=None, num_devices: int = 1):
        """The train step's DP-SGD gradient; refuses layers that mix the examples of a batch. On one device it
        skips chunks of padding rows (zoo.privacy.gradients; across devices a chunk would span several of them):
        one chunk for the whole sample but for 2% of steps."""
        if any(isinstance(m, nnx.BatchNorm) for _, m in model.iter_modules()):
            raise UserError("privacy=dpsgd needs per-example gradients, which BatchNorm mixes across the batch; "
                            "set model.batch_norm=false or use a model without BatchNorm.")
        chunks = chunk_bounds(self.stream.batch_size, self.rows) if num_devices == 1 else None
        return make_private_gradients(graphdef, task, l2_clip=self.l2_clip, noise_multiplier=self.noise_multiplier,
                                      expected_batch_size=self.stream.batch_size, axis_name=axis_name, chunks=chunks)


def plan_privacy(cfg, train_split, planned_steps: int, num_devices: int, warn: bool = True) -> Optional[PrivacyPlan]:
    """None for privacy=none. `cfg` is the whole train config (seed, trainer.batch_size, privacy). `warn=False`: the
    plan of a run made before, whose warnings its own log said (export.py's record of an unfinished run)."""
    p = cfg.privacy
    if p.mode == "none":
        return None
    from zoo.privacy import accountant as acc  # dp-accounting imports scipy.stats: ~1 s that other runs skip
    n, batch_size = len(train_split), cfg.trainer.batch_size
    q = batch_size / n
    delta = p.delta if p.delta is not None else default_delta(n)
    if warn and p.delta is not None and delta >= 1.0 / n:  # releasing one random example whole is (0, 1/n)-DP
        log.warning("privacy.delta=%g is not below 1/n = %.3g (n = %d training examples): publishing one example "
                    "in full meets such a delta; set it well below 1/n, or to null for min(1e-5, 1/(10 n)).",
                    delta, 1 / n, n)
    accountant_delta = delta * (1 - OVERFLOW_SHARE)
    # PLD's own discretisation cannot bound a delta below ~1e-15: even one step at noise 1 is then epsilon inf, and
    # a target_epsilon would be "met" only by noise that drowns every gradient (113 on digits at 1e-20)
    if p.accountant == "pld" and math.isinf(acc.epsilon(q, 1.0, 1, accountant_delta, "pld")):
        raise UserError(f"privacy.delta={delta:.3g} is below what the pld accountant can bound (epsilon inf unless "
                        "the noise drowns the gradients); raise privacy.delta (e.g. 1e-10) or set "
                        "privacy.accountant=rdp.")
    sigma = p.noise_multiplier
    if sigma is None:
        sigma = acc.solve_noise_multiplier(q, planned_steps, p.target_epsilon, accountant_delta, p.accountant)
    total_steps = planned_steps
    if p.noise_multiplier is not None and p.target_epsilon is not None:
        total_steps = acc.steps_within(q, sigma, planned_steps, p.target_epsilon, accountant_delta, p.accountant)
        total_steps -= total_steps % cfg.trainer.accumulate  # it ends on an update, as zoo.optim.check_run_length asks
        if total_steps == 0:
            raise UserError(f"privacy.target_epsilon={p.target_epsilon} is spent before the first of "
                            f"trainer.accumulate={cfg.trainer.accumulate} micro-batches completes an update; raise "
                            "privacy.target_epsilon or privacy.noise_multiplier.")
        every = cfg.trainer.eval_every
        if no_periodic_eval(cfg.trainer, total_steps):  # checked for the planned steps (check_run_length): fewer now
            lower = "lower trainer.eval_every, or " if total_steps > 1 else ""
            raise UserError(f"privacy.target_epsilon={p.target_epsilon} ends the run at step {total_steps} "
                            f"(privacy.noise_multiplier={sigma}), before trainer.eval_every={every} gives "
                            f"trainer.early_stopping a periodic eval; {lower}raise privacy.target_epsilon or "
                            "privacy.noise_multiplier.")
    eps = acc.epsilon(q, sigma, total_steps, accountant_delta, p.accountant)
    if warn and sigma == 0:
        log.warning("privacy.noise_multiplier=0: gradients are clipped without noise, which gives no privacy "
                    "guarantee (epsilon is unbounded; results.json records it as null).")
    # Truncation adds (1 + e^eps) p to delta (zoo.privacy.sampling); rows keep that within OVERFLOW_SHARE of it.
    charge = 1 + math.exp(eps) if eps <= MEANINGLESS_EPSILON else 1.0
    rows, overflow = max_batch_size(n, q, total_steps, OVERFLOW_SHARE * delta / charge)
    if eps > MEANINGLESS_EPSILON:  # the term is not within delta's share: delta is reported with it
        delta = min(1.0, accountant_delta + (1 + math.exp(min(eps, 700.0))) * overflow)
        if sigma > 0:
            remedy = _remedy_for_large_epsilon(p, q, sigma, total_steps, accountant_delta, n)
            if delta >= 1:  # any algorithm is (epsilon, 1)-DP
                raise UserError(f"epsilon {eps:.3g} is so large that the truncation of oversized Poisson samples, "
                                f"counted in delta beyond epsilon {MEANINGLESS_EPSILON:g}, makes delta 1, which "
                                f"guarantees nothing; {remedy}.")
            if warn:
                log.warning("epsilon %.3g bounds little: batch rows are not grown to keep the truncation of "
                            "oversized samples within privacy.delta, so the delta reported includes it (%.3g); %s for "
                            "a guarantee that bounds something.", eps, delta, remedy)
    if warn and total_steps < planned_steps:
        log.warning("privacy.target_epsilon=%s is reached after %d of the %d planned steps with "
                    "privacy.noise_multiplier=%s: training stops at step %d.", p.target_epsilon, total_steps,
                    planned_steps, sigma, total_steps)
    summary = (f"DP-SGD: q={q:.4g}, noise multiplier {sigma:.4g}, l2 clip {p.l2_clip}, epsilon {eps:.4g} at delta "
               f"{delta:.3g} after {total_steps} steps; samples truncated at {rows} rows (expected {batch_size} "
               "examples)")
    return PrivacyPlan(q, float(sigma), float(p.l2_clip), delta, accountant_delta, overflow, rows, total_steps,
                       planned_steps, p.target_epsilon, p.accountant,
                       PoissonStream(train_split, batch_size, cfg.seed, rows, num_devices), summary)


def default_delta(n: int) -> float:
    """privacy.delta=null: 1e-5, the usual choice, or a tenth of 1/n where that is smaller (n > 10,000). A delta must be
    well below 1/n: publishing one example in full meets delta 1/n, so min(1e-5, 1/n) would guarantee nothing from
    n = 100,000 on."""
    return min(1e-5, 0.1 / n)


def _remedy_for_large_epsilon(p, q: float, sigma: float, steps: int, accountant_delta: float, n: int) -> str:
    """The setting that brings epsilon within MEANINGLESS_EPSILON. With a target_epsilon, epsilon is the target
    (a fixed noise only lets the run go further before the budget stops it); with a fixed noise alone, the default
    delta where a smaller one set by the user is what makes epsilon large, else more noise."""
    from zoo.privacy import accountant as acc

    if p.target_epsilon is not None:
        return f"lower privacy.target_epsilon to at most {MEANINGLESS_EPSILON:g}"
    larger_delta = default_delta(n)
    if p.delta is not None and p.delta < larger_delta and acc.epsilon(
            q, sigma, steps, larger_delta * (1 - OVERFLOW_SHARE), p.accountant) <= MEANINGLESS_EPSILON:
        return f"raise privacy.delta to {larger_delta:.3g}"
    needed = acc.solve_noise_multiplier(q, steps, MEANINGLESS_EPSILON, accountant_delta, p.accountant)
    return f"raise privacy.noise_multiplier to at least {math.ceil(needed * 100) / 100:g}"


def resume_defining(saved_config: dict, current: dict) -> tuple:
    """Settings a DP-SGD checkpoint must share with the run resuming it: every step must be the one accounted."""
    modes = {(saved_config.get("privacy") or {}).get("mode"), current["privacy"]["mode"]}
    if "dpsgd" not in modes:
        return ()
    return "privacy", "trainer.batch_size", "trainer.epochs", "trainer.max_steps", "seed"


class EpsilonLogger:
    """A RunLogger that adds the epsilon spent so far to every train record."""

    def __init__(self, logger, plan: PrivacyPlan):
        self._logger, self._plan = logger, plan

    def log(self, step: int, split: str, metrics: dict, **marks) -> None:
        """RunLogger.log, with each train record's epsilon; `marks` (final, end) as it takes them."""
        if split == "train" and self._plan.noise_multiplier > 0:  # without noise there is no epsilon to log
            metrics = {**metrics, "epsilon": self._plan.epsilon(step)}
        self._logger.log(step, split, metrics, **marks)

    def __getattr__(self, name):
        return getattr(self._logger, name)

    def __setattr__(self, name, value):  # e.g. the model summary's FLOPs, which the train records' GFLOP/s use
        if name in ("_logger", "_plan"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._logger, name, value)
