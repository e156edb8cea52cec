"""The webhook server: the edges around the engine (HTTP, TLS, files, signals, metrics, logs)."""
