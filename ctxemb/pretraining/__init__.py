"""Pretraining recipes: masking, data (shards, NSP pairs, packing), multilingual sampling, vocabularies."""
