"""What a TRL user has before `trl sft --model_name_or_path base --dataset_name data`, made
here from a config (nothing downloaded from a model hub): a tiny Llama saved with
`save_pretrained`, a byte-level BPE tokenizer trained on the dataset's own text, and the
dataset as a folder of JSON lines with a "text" field.

Run with the program's own interpreter: ``python make_trl.py PROJECT`` makes ``PROJECT/base/``
and ``PROJECT/data/train.jsonl``."""
import json
import sys
from pathlib import Path

import torch
from tiny_text import bpe, corpus
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

project = Path(sys.argv[1])
base, data = project / "base", project / "data"
base.mkdir(parents=True, exist_ok=True)
data.mkdir(parents=True, exist_ok=True)
lines = corpus(2000, 24)
tok = bpe(lines, ["<unk>", "<s>", "</s>", "<pad>"])
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>")
fast.save_pretrained(base)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                     bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
LlamaForCausalLM(config).save_pretrained(base)
(data / "train.jsonl").write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
