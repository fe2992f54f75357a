"""DEHB (Awad, Mallik and Hutter, IJCAI 2021): differential evolution inside Hyperband's
brackets, as an ask/tell optimiser over the unit hypercube. NumPy only, no Ray.

This is the algorithm of the reference ``dehb`` package (0.1.2, ``dehb/optimizers/dehb.py``
and ``dehb/utils/bracket_manager.py``), job for job, without its Dask workers, ConfigSpace
and logging:

- fidelities ``max * eta**-k`` from the smallest (``min``) up, as Hyperband's;
- one DE subpopulation per fidelity, sized by the largest rung any bracket runs there;
- brackets of synchronous successive halving, started one after another, a new one
  whenever every open bracket waits on results (so several workers stay busy);
- in the first ``len(fidelities)`` brackets a higher rung takes the best configurations
  of the rung below (promotion); after that every configuration is a DE child: rand/1
  mutation from the best of the rung below, binomial crossover with the next parent of
  that fidelity's subpopulation, and selection (the child replaces its parent when it is
  at least as good).

A job is ``(config, fidelity)``: the configuration trains from scratch for that many
epochs (DEHB does not continue a run at a higher fidelity). Lower ``fitness`` is better.
Everything the optimiser holds is plain data and NumPy arrays, so it pickles (resume).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.search.spaces import ParamSpec

MIN_POP_SIZE = 3  # rand/1 mutation draws three distinct individuals


@dataclass
class Job:
    """One evaluation: ``config`` (a unit vector) at ``fidelity`` (an index into ``fidelities``)."""

    config: np.ndarray
    fidelity: int
    parent: int
    bracket: int


@dataclass
class _Subpopulation:
    population: np.ndarray  # (size, dims) in [0, 1]
    fitness: np.ndarray  # inf: not evaluated yet
    parent_counter: int = 0
    promotion: list[np.ndarray] | None = None  # the first brackets' queue from the rung below


@dataclass
class _Bracket:
    """Synchronous successive halving over ``rungs`` (fidelity indices), ``sizes`` jobs each;
    the reference's SHBracketManager."""

    id: int
    rungs: list[int]
    sizes: list[int]
    pending: list[int] = field(default_factory=list)  # still to hand out, per rung
    done: list[int] = field(default_factory=list)  # results back, per rung
    current: int = 0

    def __post_init__(self) -> None:
        self.pending, self.done = list(self.sizes), [0] * len(self.sizes)

    def next_rung(self) -> int | None:
        if self.pending[self.current] > 0:
            return self.current
        rung = (self.current + 1) % len(self.rungs)
        return rung if self.pending[rung] > 0 else None

    def register(self, rung: int) -> None:
        self.pending[rung] -= 1
        if self.pending[self.current] == 0:
            self.current = (self.current + 1) % len(self.rungs)

    def complete(self, rung: int) -> None:
        self.done[rung] += 1

    def _waiting(self, rung: int) -> bool:
        return self.done[rung] + self.pending[rung] < self.sizes[rung]

    def lower_waits(self) -> bool:
        """A rung below the current one still has results out (synchronous halving waits)."""
        return any(self._waiting(r) and self.pending[r] == 0 for r in range(self.current))

    def is_pending(self) -> bool:
        return any(n > 0 for n in self.pending)

    def is_done(self) -> bool:
        return not self.is_pending() and not any(self._waiting(r) for r in range(len(self.rungs)))


class Dehb:
    """DEHB over ``dims`` unit-interval dimensions, fidelities from ``min_fidelity`` to
    ``max_fidelity`` (epochs) spaced by ``eta``."""

    def __init__(
        self,
        dims: int,
        min_fidelity: float,
        max_fidelity: float,
        *,
        eta: float = 3,
        seed: int = 0,
        mutation_factor: float = 0.5,
        crossover_prob: float = 0.5,
    ):
        self.dims, self.eta = dims, eta
        self.mutation_factor, self.crossover_prob = mutation_factor, crossover_prob
        self.rng = np.random.default_rng(seed)
        self.levels = -int(np.log(min_fidelity / max_fidelity) / np.log(eta)) + 1  # the reference's max_SH_iter
        self.fidelities = [
            float(f) for f in max_fidelity * np.power(eta, -np.linspace(self.levels - 1, 0, self.levels))
        ]
        sizes: dict[int, int] = {}
        for i in range(self.levels):
            rungs, ns = self._bracket_plan(i)
            for rung, n in zip(rungs, ns, strict=True):
                sizes[rung] = max(n, sizes.get(rung, 0))
        self.pop_sizes = sizes
        self.subpops = {
            f: _Subpopulation(self.rng.uniform(0.0, 1.0, size=(n, dims)), np.full(n, np.inf))
            for f, n in sorted(sizes.items())
        }
        self.brackets: list[_Bracket] = []
        self.bracket_count = -1  # the reference's iteration_counter
        self.incumbent: np.ndarray | None = None
        self.incumbent_fitness = math.inf

    def _bracket_plan(self, iteration: int) -> tuple[list[int], list[int]]:
        """The rungs (fidelity indices) and jobs per rung of bracket ``iteration``."""
        s = self.levels - 1 - (iteration % self.levels)
        rungs = list(range(self.levels - 1 - s, self.levels))
        n0 = int(np.floor(self.levels / (s + 1)) * self.eta**s)
        return rungs, [max(int(n0 * self.eta ** (-i)), 1) for i in range(s + 1)]

    # ask ---------------------------------------------------------------------------------

    def ask(self) -> Job:
        bracket = self._next_bracket()
        rung = bracket.next_rung()
        assert rung is not None  # a pending bracket has a rung to hand out
        fidelity = bracket.rungs[rung]
        config, parent = self._acquire(bracket, rung)
        bracket.register(rung)
        return Job(config=config, fidelity=fidelity, parent=parent, bracket=bracket.id)

    def _next_bracket(self) -> _Bracket:
        self.brackets = [b for b in self.brackets if not b.is_done()]
        for bracket in self.brackets:
            if not bracket.lower_waits() and bracket.is_pending():
                return bracket
        self.bracket_count += 1
        rungs, sizes = self._bracket_plan(self.bracket_count)
        bracket = _Bracket(id=self.bracket_count, rungs=rungs, sizes=sizes)
        self.brackets.append(bracket)
        return bracket

    def _acquire(self, bracket: _Bracket, rung: int) -> tuple[np.ndarray, int]:
        fidelity = bracket.rungs[rung]
        sub = self.subpops[fidelity]
        parent = sub.parent_counter
        sub.parent_counter = (sub.parent_counter + 1) % self.pop_sizes[fidelity]
        target = sub.population[parent]
        lower = bracket.rungs[max(rung - 1, 0)]
        promote = bracket.sizes[rung]
        if self.bracket_count < self.levels and rung > 0:  # the first brackets promote
            return self._promotion(lower, fidelity, promote), parent
        below = self.subpops[lower]
        mutation_pop = below.population[np.argsort(below.fitness)[:promote]]
        if len(mutation_pop) < MIN_POP_SIZE:
            filler = MIN_POP_SIZE - len(mutation_pop) + 1
            everyone = np.concatenate([s.population for s in self.subpops.values()])
            extra = np.array([self._mutant(target, everyone) for _ in range(filler)])
            mutation_pop = np.concatenate((mutation_pop, extra))
        child = self._crossover(target, self._mutant(target, mutation_pop))
        return self._in_bounds(child), parent

    def _promotion(self, low: int, high: int, n: int) -> np.ndarray:
        below, above = self.subpops[low], self.subpops[high]
        evaluated = np.where(below.fitness != np.inf)[0]
        order = evaluated[np.argsort(below.fitness[evaluated])]
        if not above.promotion:
            queue = [
                below.population[i]
                for i in order
                if not np.any(np.all(below.population[i] == above.population, axis=1))
            ]
            above.promotion = queue[:n]
        if above.promotion:
            return above.promotion.pop(0).copy()
        return below.population[order[0]].copy() if len(order) else below.population[0].copy()

    def _mutant(self, target: np.ndarray, pool: np.ndarray) -> np.ndarray:
        """rand/1: ``r1 + F (r2 - r3)`` from ``pool`` without ``target``, topped up at random."""
        for i, member in enumerate(pool):
            if len(pool) > 1 and np.all(member == target):
                pool = np.concatenate((pool[:i], pool[i + 1 :]))
                break
        if len(pool) < MIN_POP_SIZE:
            pool = np.concatenate((pool, self.rng.uniform(0.0, 1.0, size=(MIN_POP_SIZE - len(pool), self.dims))))
        r1, r2, r3 = pool[self.rng.choice(len(pool), 3, replace=False)]
        return r1 + self.mutation_factor * (r2 - r3)

    def _crossover(self, target: np.ndarray, mutant: np.ndarray) -> np.ndarray:
        cross = self.rng.random(self.dims) < self.crossover_prob
        if not np.any(cross):
            cross[self.rng.integers(0, self.dims)] = True
        return np.where(cross, mutant, target)

    def _in_bounds(self, vector: np.ndarray) -> np.ndarray:
        out = np.where((vector > 1) | (vector < 0))[0]
        vector[out] = self.rng.uniform(0.0, 1.0, size=len(out))
        return vector

    # tell --------------------------------------------------------------------------------

    def tell(self, job: Job, fitness: float) -> None:
        """The result of ``job``; a non-finite fitness (a failed run) completes the job only."""
        for bracket in self.brackets:
            if bracket.id == job.bracket:
                bracket.complete(bracket.rungs.index(job.fidelity))
        if not math.isfinite(fitness):
            return
        sub = self.subpops[job.fidelity]
        if fitness <= sub.fitness[job.parent]:
            sub.population[job.parent] = job.config
            sub.fitness[job.parent] = fitness
        if sub.fitness[job.parent] < self.incumbent_fitness:
            self.incumbent = sub.population[job.parent].copy()
            self.incumbent_fitness = float(sub.fitness[job.parent])

    def seed_population(self, evaluated: list[tuple[np.ndarray, dict[int, float]]]) -> int:
        """A warm start: configurations evaluated earlier (a unit vector, and its fitness at
        fidelity indices) take the places of the random initial individuals, best first, in
        each fidelity's subpopulation. Returns how many configurations were placed."""
        placed = set()
        for fidelity, sub in self.subpops.items():
            known = sorted(
                ((values[fidelity], i) for i, (_, values) in enumerate(evaluated) if fidelity in values),
                key=lambda pair: pair[0],
            )
            for slot, (fitness, i) in enumerate(known[: len(sub.fitness)]):
                sub.population[slot], sub.fitness[slot] = evaluated[i][0], fitness
                placed.add(i)
                if fitness < self.incumbent_fitness:
                    self.incumbent, self.incumbent_fitness = evaluated[i][0].copy(), float(fitness)
        return len(placed)


def epochs(fidelity: float) -> int:
    """A DEHB fidelity as whole epochs."""
    return max(1, int(round(fidelity)))


class UnitSpace:
    """A flat space as DEHB's unit hypercube, one dimension per searched parameter (as
    ConfigSpace's vector form): ranges map linearly (log ranges in log), integers and
    choices to equal bins."""

    def __init__(self, specs: dict[str, ParamSpec]):
        self.specs = specs
        self.searched = [name for name, spec in specs.items() if spec.kind != "constant"]

    @property
    def dims(self) -> int:
        return max(1, len(self.searched))

    def config(self, vector: np.ndarray) -> dict[str, Any]:
        values = dict(zip(self.searched, vector, strict=False))
        return {
            name: spec.args[0] if spec.kind == "constant" else _value(spec, float(values[name]))
            for name, spec in self.specs.items()
        }

    def vector(self, config: dict[str, Any]) -> np.ndarray | None:
        """The unit vector of a plain config; None if it lies outside this space."""
        units = [_unit(self.specs[name], config.get(name)) for name in self.searched]
        if any(u is None for u in units):
            return None
        return np.array(units or [0.5], dtype=float)


def _value(spec: ParamSpec, u: float) -> Any:
    low, high = spec.args[0], spec.args[1] if len(spec.args) > 1 else None
    if spec.kind == "choice":
        return spec.args[min(int(u * len(spec.args)), len(spec.args) - 1)]
    if spec.kind == "randint":
        return int(min(low + int(u * (high - low)), high - 1))
    if spec.kind in ("loguniform", "qloguniform"):
        value = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    else:
        value = low + u * (high - low)
    if spec.is_quantized:
        q = spec.args[2]
        value = min(max(round(value / q) * q, low), high)
    return value


def _unit(spec: ParamSpec, value: Any) -> float | None:
    if spec.kind == "choice":
        return (spec.args.index(value) + 0.5) / len(spec.args) if value in spec.args else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    low, high = spec.args[0], spec.args[1]
    if spec.kind == "randint":
        return (value - low + 0.5) / (high - low) if low <= value < high else None
    if not low <= value <= high:
        return None
    if spec.kind in ("loguniform", "qloguniform"):
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low) if high > low else 0.5
