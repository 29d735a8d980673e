"""Reading and writing the field's data formats strictly: BEIR folders (corpus, queries, qrels) and TREC run files.

Every reader names the file and the line of a malformed row; ids are strings, never cast.
"""

from ctxemb.io.beir import (BeirData, Document, load_beir, read_corpus, read_qrels, read_queries, read_run,
                            split_queries, write_run)

__all__ = ["BeirData", "Document", "load_beir", "read_corpus", "read_qrels", "read_queries", "read_run",
           "split_queries", "write_run"]
