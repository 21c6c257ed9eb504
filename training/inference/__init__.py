"""Inference: the built-in torch engine and server, and the client for OpenAI-compatible servers."""
