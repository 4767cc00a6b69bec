"""Where the rollout restarts were before :mod:`controllers.reconcilers.route`: re-exported
so that no import breaks. New code imports :mod:`.route.restarts`."""

from controllers.reconcilers.route.restarts import (
    DEBOUNCE_SECONDS,
    MAX_PENDING,
    RETRY_BASE_SECONDS,
    RETRY_MAX_SECONDS,
    TEMPLATE_ANNOTATIONS,
    WORKLOADS,
    Action,
    Decision,
    Outcome,
    RolloutRestarts,
    decide,
    pointer_token,
    restart_patch,
    retry_delay,
    template_annotation,
)

__all__ = [
    "DEBOUNCE_SECONDS",
    "MAX_PENDING",
    "RETRY_BASE_SECONDS",
    "RETRY_MAX_SECONDS",
    "TEMPLATE_ANNOTATIONS",
    "WORKLOADS",
    "Action",
    "Decision",
    "Outcome",
    "RolloutRestarts",
    "decide",
    "pointer_token",
    "restart_patch",
    "retry_delay",
    "template_annotation",
]
