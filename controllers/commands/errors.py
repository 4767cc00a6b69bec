"""How a command ends when it does not succeed, and the exit code each way gets.

::

    CommandError        exit 1: the command ran and failed (not found, a refresh that failed
    │                   for good, a timeout, an API error); the message says which
    └── UsageError      exit 2: the command line is wrong (not a policy, a bad duration) or no
                        kubeconfig was found

Messages are printed as they are: like every rotator message, they never hold a secret value.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class CommandError(Exception):
    exit_code = EXIT_FAILED


class UsageError(CommandError):
    exit_code = EXIT_USAGE
