"""The record store: the state directory's typed records, their lock and queues."""
