"""`hutch bench`: the brokers it runs (hutch, RabbitMQ), the load generator, and one module per
scenario family (backlogs, bridges, recovery, the Spark pipeline, a board's backlog). Imported
only when `hutch bench` runs."""
