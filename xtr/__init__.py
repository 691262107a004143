"""xtr: XTR and T5-ColBERT multi-vector retrieval in JAX/Flax."""
