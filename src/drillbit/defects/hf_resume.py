"""huggingface/transformers#35782: the Trainer's auto-resume crashes on an incomplete last
checkpoint (reported at 4.45.2; drilled at the version installed, 5.24.0, whose code still
does the same: ``_save_checkpoint`` writes into ``checkpoint-N/`` in place, the weights
first and ``trainer_state.json`` last, and ``get_last_checkpoint`` returns the highest
``checkpoint-N`` whatever it holds). A save cut short between the two leaves a folder that
every restart picks and none can load: ``FileNotFoundError: … trainer_state.json``.

    torchrun --nproc-per-node 2 -m drillbit.defects.hf_resume --out DIR [--resume newest|complete]

``--resume newest`` (the default) is the Trainer's own auto-resume. ``--resume complete`` is
the workaround proposed in #35525: resume from the newest ``checkpoint-N`` that holds
``trainer_state.json``. A tiny Llama built from a config (nothing downloaded), random token
data, DDP on CPU (gloo), a checkpoint every ``--save-steps``; each file ``torch.save`` writes
(the optimizer, the scheduler, the RNG states) takes ``--save-pause-ms`` longer, as on slow
shared storage."""
from __future__ import annotations

import argparse
import os
import re
import time


def newest_complete(out: str) -> str | None:
    """The workaround: the newest checkpoint-N whose save got as far as its last file."""
    found = []
    for name in os.listdir(out):
        m = re.fullmatch(r"checkpoint-(\d+)", name)
        if m and os.path.isfile(os.path.join(out, name, "trainer_state.json")):
            found.append((int(m.group(1)), os.path.join(out, name)))
    return max(found)[1] if found else None


def slow_storage(torch, pause_s: float) -> None:
    """A real model's checkpoint files take seconds each on shared storage; a tiny one's take
    milliseconds. Each file torch.save writes is followed by a pause, so a crash can land
    between the weights and trainer_state.json, as it does on a real run; what is written,
    and in what order, is the Trainer's own."""
    real = torch.save

    def save(obj, f, *args, **kwargs):
        real(obj, f, *args, **kwargs)
        if isinstance(f, (str, os.PathLike)):
            time.sleep(pause_s)

    torch.save = save


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-steps", type=int, default=5)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--resume", choices=["newest", "complete"], default="newest")
    ap.add_argument("--save-pause-ms", type=float, default=300.0,
                    help="each checkpoint file written by torch.save takes this much longer (slow storage)")
    args = ap.parse_args(argv)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    from drillbit.defects.elastic import init_per_attempt

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n: int, seq: int, vocab: int) -> None:
            self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    class Pace(TrainerCallback):
        """A step near a real one's length (a tiny model steps in milliseconds)."""

        def on_step_end(self, a, state, control, **kwargs):
            time.sleep(args.step_time)

    slow_storage(torch, args.save_pause_ms / 1000)
    init_per_attempt()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    targs = TrainingArguments(output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=4,
                              save_steps=args.save_steps, save_total_limit=3, logging_steps=1, use_cpu=True,
                              report_to=[], disable_tqdm=False, log_level="info", log_level_replica="warning",
                              ddp_backend="gloo" if world > 1 else None, dataloader_num_workers=0)
    trainer = Trainer(model=LlamaForCausalLM(config), args=targs, train_dataset=Tokens(4096, 16, 128),
                      callbacks=[Pace()])
    last = None
    if os.path.isdir(args.out):
        last = get_last_checkpoint(args.out) if args.resume == "newest" else newest_complete(args.out)
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
