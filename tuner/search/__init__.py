"""Search: the spaces a sweep file writes (spaces.py), each scheduler and searcher in its own
module behind base.py's ``Scheduler`` and ``Searcher`` (its section of the sweep file, its
traits, its Ray Tune object, its checks), the list of them (registry.py), ``auto``'s rules
(auto.py), and the Ray Tune classes tuner extends (tune_*.py, imported only when built)."""
