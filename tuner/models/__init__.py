"""The networks a trial trains: tuner's own CNN and ResNet (``builtin``)."""
