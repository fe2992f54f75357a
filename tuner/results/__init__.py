"""Reading a finished (or running) sweep: status and best (summaries), export, predict,
the report and the UIs."""
