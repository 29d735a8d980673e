"""Pretraining recipes: masking, token shards, sequences (NSP pairs, packing), resumable batch sources, multilingual
sampling, vocabularies, and the recipe that runs them on the shared training loop."""
