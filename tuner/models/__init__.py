"""The networks a trial trains: tuner's own CNN and ResNet (``builtin``), torchvision's by
name (``zoo``), a user's factory (``factory``); ``build`` builds any of them."""
