"""Sentence- and pair-level tasks (J&M 11.4.1-11.4.2): SST-2, MRPC, RTE, SNLI, STS-B and a user's own table."""
