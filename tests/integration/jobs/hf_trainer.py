"""A small Hugging Face Trainer job, as a team would write one: a tiny Llama built from a
config (nothing downloaded), random token data, DDP on CPU (gloo) under torchrun, checkpoints
every few steps, and auto-resume from the newest ``checkpoint-N`` on restart. drillbit knows
nothing about it beyond its profile (tests/integration/test_frameworks.py).

    torchrun --nproc-per-node 4 hf_trainer.py --out DIR [--resume newest|none|weights] [--max-steps N]

The learning rate warms up over ``--warmup-steps`` (it moves every step: a replay after a
faithful restore has the very same rates, a schedule that started over has others).
``--resume weights`` is a restart that loads the newest checkpoint's weights into a fresh
Trainer (``from_pretrained``): the weights come back, the step count, the schedule, the
optimizer and the data position start over. ``--no-resume`` (``--resume none``) starts over.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from elastic_store import init_per_attempt
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


class Tokens(torch.utils.data.Dataset):
    """Counting sequences from random starts (each token the one before plus one): a tiny model
    learns them in a few dozen steps, so its loss falls well away from where it began."""

    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = (torch.randint(0, vocab, (n, 1), generator=g) + torch.arange(seq)) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Pace(TrainerCallback):
    """Keeps a step near a real one's length (tiny models step in milliseconds)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-steps", type=int, default=5)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--warmup-steps", type=int, default=50)
    ap.add_argument("--resume", choices=["newest", "none", "weights"], default="newest")
    ap.add_argument("--no-resume", dest="resume", action="store_const", const="none")
    args = ap.parse_args()
    init_per_attempt()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    last = get_last_checkpoint(args.out) if args.resume != "none" and os.path.isdir(args.out) else None
    model = LlamaForCausalLM.from_pretrained(last) if args.resume == "weights" and last else LlamaForCausalLM(config)
    targs = TrainingArguments(output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=4,
                              learning_rate=1e-2, warmup_steps=args.warmup_steps,
                              save_steps=args.save_steps, save_total_limit=3, logging_steps=1,
                              use_cpu=True, report_to=[], disable_tqdm=False, log_level="info",
                              log_level_replica="warning", ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE",
                                  "1")) > 1 else None,
                              dataloader_num_workers=0)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(4096, 16, 128), callbacks=[Pace(args.step_time)])
    trainer.train(resume_from_checkpoint=last if args.resume == "newest" else None)


if __name__ == "__main__":
    main()
