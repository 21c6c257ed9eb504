from pathlib import Path

import pytest
import torch

from training.config import ModelConfig
from training.model import create_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return create_tiny_model(ModelConfig(), tmp_path_factory.mktemp("tiny") / "model", seed=0)
