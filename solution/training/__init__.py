"""Training: the LightningModule, segment training, metrics, callbacks."""
