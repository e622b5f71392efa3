"""What a scheduled job sets without code: ``NEXUSFLOW_*`` environment variables.

An argument (to ``create_*_client`` or ``Client.run``) wins over the environment, which
wins over the default. The environment is read when a client is made, so a job's
deployment sets them in its work pool or ``prefect.yaml`` and every client it makes follows."""

from __future__ import annotations

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import setting_refused

ENV_PREFIX = "NEXUSFLOW_"


class NexusflowSettings(BaseSettings):
    """``NEXUSFLOW_MAX_TURNS=40`` sets ``max_turns``, and so on for each field."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    max_turns: int = Field(default=20, ge=1, description="Turns after which a run fails with MaxTurnsError.")
    model_retries: int = Field(
        default=0, ge=0, description="Further attempts of a turn that failed with a TransientError (off by default)."
    )
    model_retry_wait: float = Field(
        default=1.0, ge=0, description="Seconds before the first retry; doubled each time, plus jitter, capped."
    )
    output_retries: int = Field(default=2, ge=0, description="How many invalid final answers are sent back.")


def current_settings() -> NexusflowSettings:
    """Read afresh: a test or a job that sets a variable sees it in the next client."""
    try:
        return NexusflowSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = f"{ENV_PREFIX}{'_'.join(str(part) for part in first['loc']).upper()}"
        raise setting_refused(name, first["msg"][:1].lower() + first["msg"][1:], first.get("input")) from None


def environment_defaults() -> dict[str, object]:
    """Only the settings the environment sets: a client's own defaults stay its own."""
    settings = current_settings()
    return {name: getattr(settings, name) for name in settings.model_fields_set}
