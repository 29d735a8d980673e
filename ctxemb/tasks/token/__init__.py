"""Token- and span-level tasks: BIO tagging (softmax or CRF) and span NER on CoNLL files, and extractive QA
(whose data and features live in :mod:`ctxemb.tasks.qa`)."""
