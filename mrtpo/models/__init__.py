"""Small policies the project builds itself (no downloads): tokenizer, model, warm start."""
