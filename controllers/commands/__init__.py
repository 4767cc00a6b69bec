"""Commands for people, in cmctl's habits: ``rotator status bsp/NAME`` and ``rotator renew
bsp/NAME [--wait]``, also ``kubectl rotator …`` (the ``kubectl-rotator`` entry point).

One module per job: :mod:`.target` (which policy, which server, which namespace, read as kubectl
reads them), :mod:`.policyview` (what a policy and its derived Secret say, never the Secret's
data), :mod:`.servedby` (which replica and shard serve a policy, from the controller's Leases),
:mod:`.status` and :mod:`.renew` (the two commands), :mod:`.humanize` (times and tables),
:mod:`.errors` (exit codes), :mod:`.entry` (flags and dispatch, called by ``controllers.cli``).
They talk to the API server with the runtime's client, as a user would with kubectl: no cache,
no controller.
"""
