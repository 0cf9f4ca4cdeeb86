"""corrupt-checkpoint's nan-fill: the file still loads, and the weights in it are NaN (what a
local-tier copy assembled wrong gave on Megatron-LM#5281)."""
from __future__ import annotations

import math
import struct

import torch

from drillbit.faults.corrupt_checkpoint import nan_filled


def test_a_torch_save_file_still_loads_with_half_its_largest_tensor_nan(tmp_path):
    path = tmp_path / "step_15.pt"
    torch.save({"model": {"w": torch.ones(64, 32), "b": torch.ones(8)}, "step": 15}, path)
    path.write_bytes(nan_filled(path.read_bytes()))
    state = torch.load(path, weights_only=True)
    assert state["step"] == 15  # the pickle and the small tensor are untouched
    assert torch.isnan(state["model"]["w"]).sum().item() == 1024 and not torch.isnan(state["model"]["b"]).any()


def test_any_other_file_gets_nans_over_its_middle_half_and_keeps_its_size():
    data = struct.pack("<64f", *[1.0] * 64)
    out = nan_filled(data)
    values = struct.unpack("<64f", out)
    assert len(out) == len(data) and sum(math.isnan(v) for v in values) == 32
    assert not any(math.isnan(v) for v in values[:16] + values[48:])
