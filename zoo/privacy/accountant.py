"""Privacy accounting with `dp-accounting`: T Poisson-subsampled Gaussian steps, told exactly as they run.

Every DP-SGD step samples each training example independently with probability q and adds Gaussian noise
of std sigma * l2_clip to the sum of clipped gradients: `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`,
self-composed `steps` times, under add-or-remove-one neighbouring datasets.
"""
import functools
import math

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from zoo.errors import UserError
from zoo.privacy.config import MAX_NOISE_MULTIPLIER, MIN_NOISE_MULTIPLIER


class _RdpAccountant(RdpAccountant):
    """dp-accounting's RdpAccountant, but for orders whose RDP it computes as negative. Its rounding gives them at
    noise ~1e6 and q ~1e-3, and it then returns epsilon 0 for the whole (digits, batch 1, delta 1e-12: 0 where the
    pld accountant gives 0.001). Left out, the other orders give the bound; a 0 they give (the total variation
    below delta) is the true answer."""

    def get_epsilon_and_optimal_order(self, target_delta: float) -> tuple:
        kept = self.rdp >= 0
        if not kept.any():
            return super().get_epsilon_and_optimal_order(target_delta)
        return compute_epsilon(self.orders[kept], self.rdp[kept], target_delta)

    def get_epsilon(self, target_delta: float) -> float:
        return self.get_epsilon_and_optimal_order(target_delta)[0]


# PLD's discretisation rounds pessimistically, so a coarser grid is still an upper bound: 1e-3 instead of the
# default 1e-4 changed epsilon by < 1e-3 on digits and made each evaluation ~5x faster (0.2 s).
PLD_INTERVAL = 1e-3
ACCOUNTANTS = {"pld": functools.partial(PLDAccountant, value_discretization_interval=PLD_INTERVAL),
               "rdp": _RdpAccountant}
# The noise search starts at MIN_NOISE_MULTIPLIER: a target met with less noise is then met with that much.


def dpsgd_event(q: float, noise_multiplier: float, steps: int) -> dp_accounting.DpEvent:
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise_multiplier))
    return dp_accounting.SelfComposedDpEvent(step, steps)


def epsilon(q: float, noise_multiplier: float, steps: int, delta: float, accountant: str = "pld") -> float:
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:  # clipping without noise: nothing is private
        return math.inf
    if accountant == "pld" and q > 0:
        composed = pld_lib.identity(value_discretization_interval=PLD_INTERVAL).compose(
            _one_step_pld(q, noise_multiplier).self_compose(steps))
        return float(composed.get_epsilon_for_delta(delta))
    return float(ACCOUNTANTS[accountant]().compose(dpsgd_event(q, noise_multiplier, steps)).get_epsilon(delta))


@functools.lru_cache(maxsize=16)
def _one_step_pld(q: float, noise_multiplier: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD of one step, built as PLDAccountant builds it for dpsgd_event. It is ~3/4 of the accountant's cost
    (~0.1 s), and a run asks for epsilon at every train record, each time for the same step: the accountant, which
    built it anew each time, doubled the time of a DP run logging every step."""
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier, value_discretization_interval=PLD_INTERVAL, sampling_prob=q,
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)


@functools.lru_cache(maxsize=64)
def solve_noise_multiplier(q: float, steps: int, target_epsilon: float, delta: float, accountant: str) -> float:
    """The smallest noise multiplier >= MIN_NOISE_MULTIPLIER (to 1e-3) whose epsilon is at most the target. Kept
    per process: a search takes ~2 s with PLD, which a sweep's DP jobs run in one process (a population's members,
    the basic launcher's jobs) paid once each for the same privacy settings."""
    if epsilon(q, MIN_NOISE_MULTIPLIER, steps, delta, accountant) <= target_epsilon:
        return MIN_NOISE_MULTIPLIER
    # Beyond MAX_NOISE_MULTIPLIER the accountants' precision, not the noise, sets epsilon (PLD's grid keeps it near
    # 1e-3 at a small delta, and the search for a bracket ends in a traceback): such a target is refused, as is
    # that much noise given outright.
    at_most = epsilon(q, MAX_NOISE_MULTIPLIER, steps, delta, accountant)
    if not at_most <= target_epsilon:
        raise UserError(f"privacy.target_epsilon={target_epsilon:g} needs a noise multiplier above "
                        f"{MAX_NOISE_MULTIPLIER:g} at this privacy.delta (the {accountant} accountant gives epsilon "
                        f"{at_most:.3g} there), where the noise drowns every gradient; raise privacy.target_epsilon "
                        "or privacy.delta.")
    return min(MAX_NOISE_MULTIPLIER, float(dp_accounting.calibrate_dp_mechanism(
        ACCOUNTANTS[accountant], lambda sigma: dpsgd_event(q, sigma, steps), target_epsilon, delta,
        bracket_interval=dp_accounting.LowerEndpointAndGuess(MIN_NOISE_MULTIPLIER, 1.0), tol=1e-3)))


@functools.lru_cache(maxsize=64)
def steps_within(q: float, noise_multiplier: float, steps: int, target_epsilon: float, delta: float,
                 accountant: str) -> int:
    """How many of the planned `steps` keep epsilon at most the target (all of them, or fewer); kept per process
    as solve_noise_multiplier is."""
    if epsilon(q, noise_multiplier, steps, delta, accountant) <= target_epsilon:
        return steps
    if epsilon(q, noise_multiplier, 1, delta, accountant) > target_epsilon:
        raise UserError(f"one step with privacy.noise_multiplier={noise_multiplier} already spends more than "
                        f"privacy.target_epsilon={target_epsilon}; raise privacy.noise_multiplier or leave it null "
                        "to solve it from the target.")
    return int(dp_accounting.calibrate_dp_mechanism(
        ACCOUNTANTS[accountant], lambda t: dpsgd_event(q, noise_multiplier, t), target_epsilon, delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(1, steps), discrete=True))
