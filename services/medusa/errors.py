"""The root of every error Medusa raises on purpose.

Callers that want to tell Medusa's own failures (a refused network, a fenced
output, a catalog conflict) from bugs catch ``MedusaError``; each subclass keeps
the standard type it also is (``ValueError`` for bad input, ``RuntimeError`` for
a state of the world), so existing ``except ValueError`` code keeps working.
"""

from __future__ import annotations


class MedusaError(Exception):
    """Raised by Medusa for a reason it can name; the message says what and where."""
