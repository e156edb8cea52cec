"""The errors of CEL policies, apart from the CEL runtime (webhook.engine.cel): evaluate()
and the cost budget raise and catch them, and a policy set without CEL policies never loads
the runtime."""


class CelError(ValueError):
    """An expression that does not compile; the message gives line, column and a caret."""


class EvaluationError(ValueError):
    """An expression that failed on this object (a missing field, no matching overload, the
    iteration budget); the message says why, never the values it read."""


class TooCostly(EvaluationError):
    """Past a limit of the cost budget (the library counts it as the API server does); the
    message quotes nothing of the object."""
