"""What runs inside a trial: the training loop, the direct and TorchTrainer (DDP) runners,
the session seam between them and Ray, the synthetic trial, and injected faults for tests."""
