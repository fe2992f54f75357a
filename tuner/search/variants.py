"""Random search and grid search: Ray Tune's variant generator (grid values expand to every
combination, ``num_samples`` times each). On a conditional space random search draws
through Optuna's define-by-run with its random sampler."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from tuner.search import spaces
from tuner.search.base import Searcher
from tuner.strict import fail


class RandomSearcher(Searcher):
    name: Literal["random"] = "random"

    model_based: ClassVar[bool] = False
    expands_grid: ClassVar[bool] = True
    answers_suggest: ClassVar[bool] = True

    def build(self, sweep: Any, max_concurrent: int) -> Any:
        if spaces.is_conditional(sweep.param_specs()):  # random draws through Optuna's define-by-run
            from tuner.search.optuna_searcher import optuna_search

            return optuna_search(sweep, "random")
        from ray.tune.search import BasicVariantGenerator

        return BasicVariantGenerator(random_state=sweep.seed, max_concurrent=max_concurrent)

    def holds_space(self, sweep: Any) -> bool:
        return spaces.is_conditional(sweep.param_specs())

    def study_sampler(self, sweep: Any) -> Any:
        from tuner.search.optuna_searcher import optuna_sampler

        return optuna_sampler("random", sweep.seed, 0)


class GridSearcher(RandomSearcher):
    name: Literal["grid"]  # type: ignore[assignment]

    refuses_conditional: ClassVar[str | None] = "a grid expands fixed lists, not parameters that exist under one value"
    answers_suggest: ClassVar[bool] = False  # fixed lists, which an objective's own space has none of

    def check(self, sweep: Any) -> None:
        if not any(spec.kind == "grid" for spec in sweep.param_specs().values()):
            raise fail("searcher.name: 'grid' needs at least one {{grid: [...]}} parameter in the space")
