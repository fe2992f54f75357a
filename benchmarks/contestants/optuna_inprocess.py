"""Optuna in-process: one study, a successive-halving pruner, trials one after another.

The strongest in-process opponent: the same model and configurations (enqueued, so
both tools train exactly the same learning rates), the data as pre-normalised
tensors in memory, and torch using every core of the machine (``--threads``).
"""

from __future__ import annotations

import time

import optuna
import torch
from common import (
    Budget,
    Clock,
    Tensors,
    accuracy,
    build_cnn,
    contestant_args,
    scored_curve,
    train_epoch,
    write_result,
)


def main() -> None:
    clock = Clock()
    args = contestant_args(__doc__)
    budget = Budget.from_json(args.budget)
    torch.set_num_threads(args.threads)
    data = Tensors(budget)
    best: dict = {"val_accuracy": -1.0}
    trials: list[dict] = []
    rising: list[tuple[float, float, dict]] = []  # each new best model, scored on the test set at the end

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", min(budget.lrs), max(budget.lrs), log=True)
        torch.manual_seed(budget.seed + trial.number)
        generator = torch.Generator().manual_seed(budget.seed + trial.number)
        model = build_cnn(budget)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        record = {"lr": lr, "epochs": []}
        trials.append(record)
        for epoch in range(budget.epochs):
            started = time.perf_counter()
            train_epoch(model, optimizer, data.train_x, data.train_y, budget.batch_size, generator)
            val_accuracy = accuracy(model, data.val_x, data.val_y)
            record["epochs"].append(
                {"val_accuracy": val_accuracy, "compute_s": time.perf_counter() - started, "at": time.time()}
            )
            if val_accuracy > best["val_accuracy"]:
                best.update(val_accuracy=val_accuracy, state={k: v.clone() for k, v in model.state_dict().items()})
                rising.append((record["epochs"][-1]["at"], val_accuracy, best["state"]))
            trial.report(val_accuracy, epoch + 1)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return val_accuracy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=budget.seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(
            min_resource=budget.grace_period, reduction_factor=budget.reduction_factor
        ),
    )
    for lr in budget.lrs:
        study.enqueue_trial({"lr": lr})
    study.optimize(objective, n_trials=len(budget.lrs))

    inner_wall = clock()
    model = build_cnn(budget)

    def test_accuracy(state: dict) -> float:
        model.load_state_dict(state)
        return accuracy(model, data.test_x, data.test_y)

    epochs = [e for t in trials for e in t["epochs"]]
    best_curve = scored_curve(rising, test_accuracy)  # its last model is the best one
    write_result(
        args.out,
        threads=args.threads,
        trials=trials,
        epochs_run=len(epochs),
        compute_s=sum(e["compute_s"] for e in epochs),
        best_val_accuracy=best["val_accuracy"],
        test_accuracy=best_curve[-1][2],
        pruned=sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials),
        curve=[(e["at"], e["val_accuracy"]) for e in epochs],  # when each epoch's score was known
        best_curve=best_curve,
        inner_wall_s=inner_wall,
    )


if __name__ == "__main__":
    main()
