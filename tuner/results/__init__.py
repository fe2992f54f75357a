"""Reading a finished (or running) sweep: status, best, export, predict, report, the UIs,
and the model file MLflow serves."""
