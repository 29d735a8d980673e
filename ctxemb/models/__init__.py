"""What a model *is* before any module is built: its encoder configuration (``encoder_config``), its tokenizer
(``tokenization``), where its files are (``hub``: a directory, the names ctxemb's packages ship, or a Hugging Face
Hub name through its cache), and the torch-free settings of the heads (``head_options``)."""
