"""The command line's parser (tuner/cli/__init__.py): each subject's module adds its commands,
and ``tuner --help`` lists them as it always has."""

from __future__ import annotations

import argparse
import sys

from tuner import cli


def test_help_lists_every_command_in_its_order_each_handled_in_its_subjects_module():
    (commands,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    order = "sweep submit jobs stop ray resume extend status best export predict serve report ui validate schema"
    assert list(commands.choices) == order.split()
    for name, parser in commands.choices.items():
        handler = parser.get_default("handler")
        assert handler.__name__ == f"cmd_{name}"
        assert sys.modules[handler.__module__] in cli.SUBJECTS, name
