"""The bus on RabbitMQ: the transport, and what only RabbitMQ offers.

``Bus`` fills the broker's seam (``bus/_hooks.py``) with aio-pika: the connection and its
failover over a cluster's nodes, publishing and consuming (``_amqp``, ``_publisher``), the
translation of aio-pika's errors, and the features kept by the broker: journals on
streams, the audit stream, the dead-letter queue, and the queues' word on who is there.
Only this room imports aio-pika, aiormq or pamqp; ``agentbus.bus`` re-exports its public
names.
"""
