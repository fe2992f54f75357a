"""``--replicas`` and ``--autoscale`` as ``tuner serve`` reads them, and what Serve is given."""

from __future__ import annotations

import pytest

from tuner.errors import TunerError
from tuner.serving.deploy import Scale


def test_replicas_are_a_fixed_count():
    assert Scale.parse(None, None).options() == {"num_replicas": 1}
    assert Scale.parse(3, None).options() == {"num_replicas": 3}
    assert Scale.parse(3, None).describe() == "3 replica(s)"


def test_autoscale_gives_serve_its_bounds_and_starts_with_at_least_one():
    config = Scale.parse(None, "0..4").options()["autoscaling_config"]
    assert (config["min_replicas"], config["initial_replicas"], config["max_replicas"]) == (0, 1, 4)
    config = Scale.parse(None, "2..3").options()["autoscaling_config"]
    assert (config["min_replicas"], config["initial_replicas"], config["max_replicas"]) == (2, 2, 3)
    assert Scale.parse(None, "1..4").describe() == "1 to 4 replicas, by load"


@pytest.mark.parametrize(
    ("replicas", "autoscale", "said"),
    [
        (0, None, "serve --replicas: at least 1, but got 0"),
        (2, "1..4", "give --replicas N or --autoscale MIN..MAX, not both"),
        (None, "4..1", "serve --autoscale: MIN..MAX with 0 <= MIN <= MAX and MAX >= 1, e.g. 1..4, but got '4..1'"),
        (None, "0..0", "but got '0..0'"),
        (None, "1-4", "but got '1-4'"),
        (None, "..4", "but got '..4'"),
    ],
)
def test_a_bad_scale_is_one_line(replicas, autoscale, said):
    with pytest.raises(TunerError) as refused:
        Scale.parse(replicas, autoscale)
    assert said in str(refused.value) and "\n" not in str(refused.value)
