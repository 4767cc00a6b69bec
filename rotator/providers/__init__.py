"""Credential providers: one module per credential type, each independent of the others.

A provider turns a spec (an engine dataclass) and the inputs the controller resolved for it
(referenced Secret data, tokens) into a :class:`~rotator.credentials.Credential`.
"""
