"""A deterministic simulation of a whole cluster of replicas (see ``__main__.py``)."""
