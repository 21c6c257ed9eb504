from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from training.config import ModelConfig
from training.model import build_char_tokenizer, create_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return create_tiny_model(ModelConfig(), tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture
def no_bos_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny model's vocabulary without a BOS token, like Qwen's tokenizers."""
    tok = PreTrainedTokenizerFast(
        tokenizer_object=build_char_tokenizer().backend_tokenizer,
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    assert tok.bos_token_id is None
    return tok
