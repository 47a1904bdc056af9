"""A Qwen3-Omni folder is checked before any stage starts: one ModelFolderError naming the file and field."""

import json
import shutil

import pytest

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from stages.models.model_folder import ModelFolderError
from stages.models.qwen3_omni.folder import Qwen3OmniFolder


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return write_tiny_folder(tmp_path_factory.mktemp("good"), SHAPES["tiny-a"], 0)


@pytest.fixture
def folder(good, tmp_path):
    return shutil.copytree(good, tmp_path / "folder")


def edit_config(folder, edit) -> None:
    file = folder / "config.json"
    data = json.loads(file.read_text())
    edit(data)
    file.write_text(json.dumps(data))


def test_a_good_folder_gives_its_config_and_a_tokenizer_with_its_ids(good):
    config = Qwen3OmniFolder(good).check()
    tokenizer = Qwen3OmniFolder(good).tokenizer()
    assert (tokenizer.im_start_id, tokenizer.im_end_id) == (config.tokens.im_start_token_id,
                                                            config.tokens.im_end_token_id)
    assert tokenizer.audio_pad_id == config.tokens.audio_token_id
    assert tokenizer.stop_ids == {config.tokens.im_end_token_id}


def test_a_missing_shard_is_named(folder):
    shard = sorted(folder.glob("*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(ModelFolderError, match=shard.name):
        Qwen3OmniFolder(folder).check()


def test_another_architecture_is_refused(folder):
    edit_config(folder, lambda data: data.update(architectures=["LlamaForCausalLM"], model_type="llama"))
    with pytest.raises(ModelFolderError, match="architectures is \\['LlamaForCausalLM'\\]"):
        Qwen3OmniFolder(folder).check()


def test_a_missing_field_is_named_by_its_path(folder):
    edit_config(folder, lambda data: data["thinker_config"]["text_config"].pop("num_hidden_layers"))
    with pytest.raises(ModelFolderError, match="thinker_config.text_config.num_hidden_layers is missing"):
        Qwen3OmniFolder(folder).check()


def test_a_tokenizer_that_disagrees_with_the_config_is_refused(folder):
    edit_config(folder, lambda data: data.update(user_token_id=data["assistant_token_id"]))
    with pytest.raises(ModelFolderError, match="user_token_id"):
        Qwen3OmniFolder(folder).check()


def test_a_template_that_is_not_chatml_is_refused(folder):
    (folder / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    with pytest.raises(ModelFolderError, match="chat template"):
        Qwen3OmniFolder(folder).default_instructions()
