"""The training loop shared by pretraining, fine-tuning and sense training: optimizer, schedule, exact resume, torchrun."""
