"""The `privacy` config group's schema and its value checks (run before any JAX work)."""
import math
from dataclasses import dataclass
from typing import Optional

from zoo.errors import UserError

MODES = ("none", "dpsgd")
ACCOUNTANT_NAMES = ("pld", "rdp")
# Less noise than this (other than none) bounds nothing (epsilon > ~20 on digits), and the PLD accountant needs
# minutes for it or fails: as sigma -> 0 its evaluations slow down (52 s instead of 5 s from 0.05).
MIN_NOISE_MULTIPLIER = 0.3
# More noise than this drowns every gradient (epsilon is 0 to the accountant's precision); from ~1e154 dp-accounting
# overflows (OverflowError) and from ~1e10 its RDP orders fail to converge.
MAX_NOISE_MULTIPLIER = 1e6
FLOAT32_MAX = 3.4028234663852886e38  # the noise std is a float32 in the step: beyond it the noise is inf
# l2_clip is a float32 in the step too: below its smallest normal number it is 0 (denormals flush to zero), and
# padding rows' scale l2_clip / |0| is then nan, hence every update
FLOAT32_TINY = 1.1754943508222875e-38
# Null unless DP-SGD is asked for: set under privacy=none, they would train without privacy and say nothing.
DPSGD_ONLY = ("target_epsilon", "noise_multiplier", "delta")


@dataclass
class PrivacyConfig:
    mode: str = "none"  # none | dpsgd
    l2_clip: float = 1.0  # each example's gradient is clipped to this L2 norm
    noise_multiplier: Optional[float] = None  # noise std / l2_clip; null: solved from target_epsilon
    target_epsilon: Optional[float] = None  # with noise_multiplier too: the run stops before exceeding it
    delta: Optional[float] = None  # null: min(1e-5, 0.1 / train examples)
    accountant: str = "pld"  # pld (privacy loss distributions, tight) | rdp (Renyi DP, faster, looser)


# DP-SGD settings with a value of their own under privacy=none too: one set to another is refused likewise
DPSGD_ONLY_DEFAULTS = {"l2_clip": PrivacyConfig.l2_clip, "accountant": PrivacyConfig.accountant}


def validate_privacy(cfg, new_run: bool = True) -> None:
    """`cfg` is the whole train config: DP-SGD also constrains the model. `new_run`: a config about to train, not
    a finished run's saved one, which is read as it was trained."""
    from zoo.config import is_positive_finite  # zoo.config imports this module for its schema

    p = cfg.privacy
    if p.mode not in MODES:
        raise UserError(f"privacy.mode must be one of {MODES}, got {p.mode!r}.")
    if p.mode == "none":
        if new_run:
            _refuse_dpsgd_settings(p)
        return
    if p.accountant not in ACCOUNTANT_NAMES:
        raise UserError(f"privacy.accountant must be one of {ACCOUNTANT_NAMES}, got {p.accountant!r}.")
    if not is_positive_finite(p.l2_clip):  # unbounded gradients: no noise makes them private
        raise UserError(f"privacy.l2_clip must be a positive finite number, got {p.l2_clip!r}.")
    if p.l2_clip < FLOAT32_TINY:
        raise UserError(f"privacy.l2_clip={p.l2_clip:g} is below float32's smallest normal number, "
                        f"{FLOAT32_TINY:.3g}, which the step computes as 0; raise privacy.l2_clip.")
    if p.noise_multiplier is None and p.target_epsilon is None:
        raise UserError("privacy=dpsgd needs privacy.target_epsilon (the noise is then solved for the run) or "
                        "privacy.noise_multiplier; set one of them.")
    if p.noise_multiplier is not None and not (p.noise_multiplier >= 0 and math.isfinite(p.noise_multiplier)):
        raise UserError(f"privacy.noise_multiplier must be a finite number >= 0, got {p.noise_multiplier!r}.")
    if p.noise_multiplier is not None and 0 < p.noise_multiplier < MIN_NOISE_MULTIPLIER:
        raise UserError(f"privacy.noise_multiplier={p.noise_multiplier} is below {MIN_NOISE_MULTIPLIER}, where the "
                        "guarantee bounds nothing and its accounting takes minutes; use at least "
                        f"{MIN_NOISE_MULTIPLIER}, or 0 to clip without noise (no guarantee).")
    if p.noise_multiplier is not None and p.noise_multiplier > MAX_NOISE_MULTIPLIER:
        raise UserError(f"privacy.noise_multiplier={p.noise_multiplier:g} is above {MAX_NOISE_MULTIPLIER:g}, where "
                        "the noise drowns every gradient and dp-accounting overflows; use at most "
                        f"{MAX_NOISE_MULTIPLIER:g}.")
    if p.noise_multiplier and p.noise_multiplier * p.l2_clip > FLOAT32_MAX:
        raise UserError(f"privacy.noise_multiplier * privacy.l2_clip = {p.noise_multiplier * p.l2_clip:g} is a noise "
                        "std beyond float32, which makes every update inf; lower privacy.l2_clip.")
    if p.target_epsilon is not None and not is_positive_finite(p.target_epsilon):
        raise UserError(f"privacy.target_epsilon must be a positive finite number, got {p.target_epsilon!r}.")
    if p.delta is not None and not 0 < p.delta < 1:
        raise UserError(f"privacy.delta must be in (0, 1), got {p.delta!r}.")
    if cfg.model.get("batch_norm", False):
        raise UserError("privacy=dpsgd needs per-example gradients, which BatchNorm mixes across the batch; set "
                        "model.batch_norm=false.")


def _refuse_dpsgd_settings(p) -> None:
    """`privacy.target_epsilon=3` without `privacy=dpsgd` must not train a model the user takes for private."""
    given = [key for key in DPSGD_ONLY if p.get(key) is not None]
    given += [key for key, default in DPSGD_ONLY_DEFAULTS.items() if p.get(key, default) != default]
    if given:
        raise UserError(f"privacy.{given[0]} only applies to privacy=dpsgd, and without it this run would train "
                        f"without privacy; add privacy=dpsgd to train privately, or remove privacy.{given[0]}.")
