"""ragassay: an evaluation instrument for RAG pipelines."""
__version__ = "0.1.0"
