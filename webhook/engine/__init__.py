"""The engine: objects and policies in, decisions and patches out. Pure: no I/O.

It imports nothing from `webhook.server` or `webhook.cli`, so the webhook, the CLI and a
user's script all call the very same `evaluate`.
"""
