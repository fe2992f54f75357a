"""``python -m tuner``: the command line lives in tuner/cli.py."""

from tuner.cli import run

run()
