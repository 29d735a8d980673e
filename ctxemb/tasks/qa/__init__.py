"""Extractive question answering's data and features: SQuAD-format files, QA tables, cloze questions."""
