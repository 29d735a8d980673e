"""Pretraining (J&M 11.2): masking, token shards, sequences (NSP pairs, packing), resumable batch sources,
multilingual sampling, vocabularies, and the objectives as tasks of the one contract."""
