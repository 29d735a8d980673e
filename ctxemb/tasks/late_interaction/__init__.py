"""Training a late-interaction (ColBERT-style) retriever from BEIR qrels or pair tables."""
