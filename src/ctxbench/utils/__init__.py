"""Utilities that know nothing else of the package: files, locks, batching, progress, cgroup limits, tokenizer
helpers, character-to-token spans, packaged assets."""
