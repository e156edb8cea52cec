"""The engine: objects and policies in, decisions and patches out. Pure: no I/O.

Two steps: `decode` (decode.py) makes of a manifest the object the API server hands a
webhook, or finds what it refuses; `evaluate` (evaluate.py) judges an object for a `Review`
(review.py: everything beside the object) and returns a `Decision` (results.py). It imports
nothing from `webhook.server` or `webhook.cli`, so the webhook, the CLI and a user's script
all call the very same two functions.
"""
