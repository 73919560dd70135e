"""Tokenized shards: tokenizer-bound token arrays with EOS boundaries, counts and checksums."""
