"""What the chain's controllers read, and how it is kept: the informers of the chain and their
indexes, trimmed on the way in, and the echoes of this process's own writes.

- :mod:`.chaincache` — the chain's informers (policies, backends, routes, Secrets), built once;
- :mod:`.crviews` — what a cached BackendSecurityPolicy, ServiceBackend or Route keeps;
- :mod:`.secretviews` — what a cached Secret keeps (the route config: a hash of its data);
- :mod:`.indexes` — "who references X" as a lookup; the one reading of ``targetRefs`` and
  ``backendRefs``;
- :mod:`.ownwrites` — the writes this process made, so their echoes wake nobody.
"""
