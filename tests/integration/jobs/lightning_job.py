"""A small PyTorch Lightning job, as a team would write one: a LightningModule on random
data, DDP on CPU (gloo) under torchrun, a ModelCheckpoint every few steps, and resume from
``last.ckpt`` on restart. drillbit knows nothing about it beyond its profile
(tests/integration/test_frameworks.py).

    torchrun --nproc-per-node 4 lightning_job.py --out DIR [--no-resume] [--max-steps N]
"""
from __future__ import annotations

import argparse
import os
import time

import lightning as L
import torch
from elastic_store import init_per_attempt
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar


class Tiny(L.LightningModule):
    def __init__(self, step_time: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.step_time = step_time

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)  # on the bar, where the lightning preset reads it
        time.sleep(self.step_time)  # a tiny model steps in milliseconds; keep a step near a real one's length
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-steps", type=int, default=5)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--no-resume", action="store_true")
    args = ap.parse_args()
    init_per_attempt()
    L.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(400000, 32, generator=g), torch.randn(400000, 1, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    ckpt = ModelCheckpoint(dirpath=os.path.join(args.out, "checkpoints"), every_n_train_steps=args.save_steps,
                           save_top_k=-1, save_last=True)
    trainer = L.Trainer(accelerator="cpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")), strategy="ddp",
                        max_steps=args.max_steps, callbacks=[ckpt, TQDMProgressBar(refresh_rate=1)],
                            default_root_dir=args.out, log_every_n_steps=1,
                        enable_model_summary=False, logger=False)
    last = os.path.join(args.out, "checkpoints", "last.ckpt")
    trainer.fit(Tiny(args.step_time), loader, ckpt_path=None if args.no_resume or not os.path.exists(last) else last)


if __name__ == "__main__":
    main()
