"""torchvision's networks by name and a user's factory, built as a trial builds them."""

from __future__ import annotations

import pytest
import torch
import torchvision

from tuner.errors import TunerError
from tuner.models import zoo
from tuner.models.build import build_model, label


def test_a_grey_image_goes_through_a_zoo_network_with_the_datas_classes():
    model = build_model("torchvision:resnet18", in_channels=1, num_classes=7, image_size=28, options={})
    assert isinstance(model[0], zoo.RepeatChannels)
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 7)
    colour = build_model("torchvision:mobilenet_v3_small", in_channels=3, num_classes=4, image_size=32, options={})
    assert colour(torch.zeros(2, 3, 32, 32)).shape == (2, 4)


def test_local_weights_load_every_matching_key_and_leave_another_classifier_as_built(tmp_path):
    pretrained = torchvision.models.resnet18(num_classes=1000)
    torch.save(pretrained.state_dict(), tmp_path / "r18.pth")
    model = build_model("torchvision:resnet18", in_channels=1, num_classes=10, image_size=28, options={})
    left = zoo.load_weights(model, tmp_path / "r18.pth", in_channels=1)
    assert left == ["fc.bias", "fc.weight"]
    assert torch.equal(model[1].conv1.weight, pretrained.conv1.weight)
    assert torch.equal(model[1].layer4[1].bn2.running_var, pretrained.layer4[1].bn2.running_var)


def test_weights_of_another_network_name_the_file_and_the_first_key(tmp_path):
    torch.save(torchvision.models.resnet34().state_dict(), tmp_path / "r34.pth")
    model = build_model("torchvision:resnet18", in_channels=3, num_classes=10, image_size=32, options={})
    with pytest.raises(TunerError, match=r"^model\.weights: .*r34\.pth: key 'layer1\.2\.conv1\.weight' is not in"):
        zoo.load_weights(model, tmp_path / "r34.pth", in_channels=3)
    wide = torchvision.models.resnet18()
    wide.conv1 = torch.nn.Conv2d(3, 64, 5, stride=2, padding=2, bias=False)
    torch.save(wide.state_dict(), tmp_path / "wide.pth")
    with pytest.raises(
        TunerError, match=r"key 'conv1\.weight' has shape \(64, 3, 5, 5\), the network's is \(64, 3, 7, 7\)"
    ):
        zoo.load_weights(model, tmp_path / "wide.pth", in_channels=3)
    (tmp_path / "junk.pth").write_bytes(b"not a file torch wrote")
    with pytest.raises(TunerError, match=r"junk\.pth: not a state dict torch can read"):
        zoo.load_weights(model, tmp_path / "junk.pth", in_channels=3)


def test_a_factory_gets_its_options_and_only_the_data_keywords_it_takes(tmp_path):
    (tmp_path / "users_models.py").write_text(
        "from torch import nn\n\ndef build(width, num_classes):\n    return nn.Linear(width, num_classes)\n"
    )
    options = {"factory": "users_models:build", "width": 5}
    model = build_model("factory", in_channels=1, num_classes=3, image_size=28, options=options, code_folder=tmp_path)
    assert (model.in_features, model.out_features) == (5, 3)
    assert label("factory", options) == "users_models.build" and label("torchvision:resnet50", {}) == "resnet50"
