"""What sits on top of both the core (``medusa``) and the Spark data plane (``medusa_spark``):
the ``medusa`` command, the demo, the failover run and the benchmarks.

Dependencies point one way: ``medusa_spark`` uses ``medusa``, this package uses both,
and neither of them imports this one (tests/unit/test_dependencies.py checks it).
"""

from medusa.stack.services import register_service_commands
from medusa_apps.services import SERVICE_COMMANDS

# The launcher's default, for callers that start the stack without naming the services'
# commands (``medusa up``; the tests' federation).
register_service_commands(SERVICE_COMMANDS)
