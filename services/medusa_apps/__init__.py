"""What sits on top of both the core (``medusa``) and the Spark data plane (``medusa_spark``):
the ``medusa`` command, the demo, the failover run and the benchmarks.

Dependencies point one way: ``medusa_spark`` uses ``medusa``, this package uses both,
and neither of them imports this one (tests/unit/test_dependencies.py checks it).
"""
