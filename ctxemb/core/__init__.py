"""Core utilities every layer may use: argument and file validation, crash-safe saves (atomic files and
directories, the one-step exchange, what a replaced file keeps), locks, paths, the precision names and the CPU's
abilities, the machine's description, protocols, lazy exports, and the text rules shared by search and training
(sentence splitting, the form BM25 reads). Imports nothing else from ctxemb but its version."""
