"""A small Hugging Face Trainer job, as a team would write one: a tiny Llama built from a
config (nothing downloaded), random token data, DDP on CPU (gloo) under torchrun, checkpoints
every few steps, and auto-resume from the newest ``checkpoint-N`` on restart. drillbit knows
nothing about it beyond its profile (tests/integration/test_frameworks.py).

    torchrun --nproc-per-node 4 hf_trainer.py --out DIR [--no-resume] [--max-steps N]
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
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

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
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args()
    init_per_attempt()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    targs = TrainingArguments(output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=4,
                              save_steps=args.save_steps, save_total_limit=3, logging_steps=1,
                              use_cpu=True, report_to=[], disable_tqdm=False, log_level="info",
                              log_level_replica="warning", ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE",
                                  "1")) > 1 else None,
                              dataloader_num_workers=0)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(4096, 16, 128), callbacks=[Pace(args.step_time)])
    last = None if args.no_resume or not os.path.isdir(args.out) else get_last_checkpoint(args.out)
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
