"""`hydra.sweeper.params` in Hydra's override grammar -> Optuna distributions, parsed by Hydra's own parser.

    interval(a, b)            FloatDistribution (Hydra reads its ends as floats; int(interval(a, b)): IntDistribution)
    tag(log, interval(a, b))  the same on a log scale
    choice(x, y, ...)         CategoricalDistribution (lists are passed as their override text: [64, 64])
    range(a, b[, step])       IntDistribution over [a, b) (FloatDistribution when a value is a float)
    plain value               a fixed override, passed to every trial
"""
from dataclasses import dataclass, field

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from hydra.errors import HydraException

from zoo.errors import UserError, brief


@dataclass
class SearchSpace:
    distributions: dict = field(default_factory=dict)  # key -> optuna distribution
    fixed: dict = field(default_factory=dict)  # key -> the override every trial gets, as written

    def grid(self, sampler: str = "hydra/sweeper/sampler=grid") -> dict:
        """key -> the list of values GridSampler walks; only discrete distributions have one. `sampler`: how the
        refusal of an interval names the sampler that walks them."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        grid = {}
        for key, d in self.distributions.items():
            if isinstance(d, CategoricalDistribution):
                grid[key] = list(d.choices)
            elif isinstance(d, IntDistribution):
                grid[key] = list(range(d.low, d.high + 1, d.step))
            elif d.step is not None:  # a float range(...): its values, as Hydra's range yields them
                steps = round((d.high - d.low) / d.step)
                grid[key] = [float(f"{d.low + i * d.step:.12g}") for i in range(steps + 1)]
            else:
                raise UserError(f"hydra.sweeper.params.{key} is a continuous interval, which a grid cannot walk; "
                                f"use choice(...) or range(...) with {sampler}.")
        return grid


def zero_step(override: Override) -> UserError | None:
    """The sentence for a range that steps by 0: Python's range() raises a ValueError for it, Hydra's float range a
    HydraException, each a traceback where Hydra's sweepers or the zoo's checks enumerate it."""
    if override.is_range_sweep() and override.value().step == 0:
        return UserError(f"{override.input_line} steps by 0, so it never reaches its end; give it a step other than 0.")
    return None


def _distribution(override: Override):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    value = override.value()
    if (refused := zero_step(override)) is not None:
        raise refused
    tags = sorted(getattr(value, "tags", None) or ())  # a tag not read left the search on a linear scale
    if [t for t in tags if t != "log"]:
        unread = ", ".join(t for t in tags if t != "log")
        raise UserError(f"{override.input_line} is tagged {unread}, which the Optuna sweeper does not read; "
                        "tag(log, interval(a, b)) is the one tag it takes (a log scale).")
    if tags and not override.is_interval_sweep():
        raise UserError(f"{override.input_line} asks for a log scale, which only an interval has; search "
                        "tag(log, interval(a, b)) (tag(log, int(interval(a, b))) for integers), or leave the tag out.")
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if override.is_range_sweep():
        # Hydra's range excludes `stop`, Optuna's includes `high`: the last value is the last one range yields.
        values = list(override.sweep_iterator())
        if not values:
            raise UserError(f"{override.input_line} is an empty range; widen it.")  # (a sweep has no value string)
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            return FloatDistribution(float(values[0]), float(values[-1]), step=float(value.step))
        return IntDistribution(int(values[0]), int(values[-1]), step=int(value.step))
    if override.is_interval_sweep():
        log = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log)
        return FloatDistribution(float(value.start), float(value.end), log=log)
    raise UserError(f"{override.input_line} is a sweep the Optuna sweeper cannot sample; use interval(...), "
                    "tag(log, interval(...)), choice(...) or range(...).")


def _checked_distribution(override: Override):
    """Optuna's own checks on a range (low <= high, low > 0 on a log scale) are the user's input to change."""
    try:
        return _distribution(override)
    except ValueError as e:
        raise UserError(f"{override.input_line} cannot be searched: {brief(e).rstrip('.')}; change the range of "
                        f"{override.get_key_element()}.") from None


def parse_search_space(params: dict, arguments: list) -> SearchSpace:
    """The preset's `params`, then the command line's overrides (which win for the same key)."""
    lines = [f"{key}={value}" for key, value in (params or {}).items()] + list(arguments)
    parser = OverridesParser.create()
    try:
        overrides = parser.parse_overrides(lines)
    except HydraException as e:
        for line in lines:  # the one that does not parse, named by its setting (the command line's Hydra parsed)
            try:
                parser.parse_overrides([line])
            except HydraException as error:
                where = f"hydra.sweeper.params.{line}" if line not in arguments else line
                said = [m for m in str(error).splitlines() if m and not m.startswith(("See ", "Error parsing"))]
                raise UserError(f"{where} could not be parsed ({(said or [brief(error)])[0].rstrip('.')}); write it "
                                "in Hydra's override grammar, e.g. choice(1, 2), interval(0.1, 0.5), "
                                "range(1, 10).") from None
        raise UserError(f"a sweep parameter could not be parsed: {str(e).splitlines()[0]}") from None
    space = SearchSpace()
    for override in overrides:
        key = override.get_key_element()
        space.distributions.pop(key, None)  # a later override of the same key replaces the earlier one
        space.fixed.pop(key, None)
        if override.is_sweep_override():
            space.distributions[key] = _checked_distribution(override)
        else:
            space.fixed[key] = override.input_line
    return space
