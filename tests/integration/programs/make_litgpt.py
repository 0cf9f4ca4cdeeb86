"""What a LitGPT user has before `litgpt finetune_full CHECKPOINT_DIR`, made here from a config
(nothing downloaded from a model hub): a tiny model's `lit_model.pth` and `model_config.yaml`,
a byte-level BPE tokenizer trained on the dataset's own text (`tokenizer.json`,
`tokenizer_config.json`), and an instruction dataset in LitGPT's JSON format.

Run with the program's own interpreter: ``python make_litgpt.py PROJECT`` makes
``PROJECT/base/`` and ``PROJECT/train.json``."""
import json
import sys
from pathlib import Path

import torch
from litgpt.config import Config
from litgpt.model import GPT
from litgpt.utils import save_config
from tiny_text import bpe, corpus

project = Path(sys.argv[1])
base = project / "base"
base.mkdir(parents=True, exist_ok=True)
lines = corpus(400, 12)
tok = bpe(lines, ["<unk>", "<s>", "</s>"])
tok.save(str(base / "tokenizer.json"))
(base / "tokenizer_config.json").write_text(json.dumps({
    "bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}))
config = Config(name="drill-tiny", block_size=128, vocab_size=tok.get_vocab_size(), padded_vocab_size=320, n_layer=4,
                n_head=4, n_embd=128, rotary_percentage=1.0, parallel_residual=False, bias=False,
                norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", intermediate_size=256)
save_config(config, base)
torch.manual_seed(0)
torch.save(GPT(config).state_dict(), base / "lit_model.pth")
(project / "train.json").write_text(json.dumps(
    [{"instruction": f"count {i}", "input": "", "output": line} for i, line in enumerate(lines)]))
