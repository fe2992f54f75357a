"""What a sweep records outside its folder: MLflow (parent and nested runs, the registered
model) and TensorBoard event files."""
