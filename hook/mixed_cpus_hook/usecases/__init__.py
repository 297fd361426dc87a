"""The use cases both front ends share: admit, update, release, reconcile, sync, status.
Each takes the state lock it needs."""
