"""A Lightning callback that times training steps: seconds and configs of every step after the first few (and the
configs of all), written as JSON to $STEP_METER_OUT when training ends. benchmarks/real_size.py passes it to
`solution fit` of any commit (`--trainer.callbacks+=step_meter.StepMeter`, benchmarks/ on PYTHONPATH): configs a step
= the batch's real (unpadded) configs, in every version of the package's batch."""

from __future__ import annotations

import json
import os
import time

import lightning.pytorch as pl


class StepMeter(pl.Callback):
    """Seconds and configs of each training step, the first `warmup` left out."""

    def __init__(self, warmup: int = 3) -> None:
        self.warmup, self.steps, self.start = warmup, [], 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.append((time.perf_counter() - self.start, int(batch.config_mask.sum())))

    def on_train_end(self, trainer, pl_module) -> None:
        kept = self.steps[self.warmup:]
        with open(os.environ["STEP_METER_OUT"], "w") as handle:
            json.dump({"seconds": sum(s for s, _ in kept), "configs": sum(c for _, c in kept), "steps": len(kept),
                       "all_configs": sum(c for _, c in self.steps)}, handle)
