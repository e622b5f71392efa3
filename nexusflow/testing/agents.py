"""Per style, what points that agent CLI at a ``ScriptedModelServer``: its environment, and
the settings files it reads, written into a home folder of the caller's choosing (so the
user's own logins and settings are never touched). ``nexusflow styles verify`` checks a
recipe against the CLI you have installed."""

from __future__ import annotations

import json
from pathlib import Path

from ..transports.oneshot.style import CliStyles
from .errors import no_scripted_recipe

FAKE_KEY = "nexusflow-scripted-key"


def scripted_environment(
    style: CliStyles, url: str, home: Path, model: str = "scripted-model", *, acp: bool = False
) -> dict[str, str]:
    """Environment that makes ``style``'s CLI talk to the scripted server at ``url``.
    ``acp``: for its ACP launch, where our served tools must stay visible to the model."""
    home.mkdir(parents=True, exist_ok=True)
    base = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    if style is CliStyles.CLAUDE:
        claude_config = home / ".claude"
        claude_config.mkdir(exist_ok=True)
        return base | {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": FAKE_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CONFIG_DIR": str(claude_config),
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "DISABLE_AUTOUPDATER": "1",
        }
    if style is CliStyles.CODEX:
        codex_home = home / ".codex"
        codex_home.mkdir(exist_ok=True)
        (codex_home / "config.toml").write_text(
            f'model = "{model}"\n'
            'model_provider = "scripted"\n'
            "[model_providers.scripted]\n"
            'name = "scripted"\n'
            f'base_url = "{url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "NEXUSFLOW_SCRIPTED_KEY"\n'
        )
        return base | {"CODEX_HOME": str(codex_home), "NEXUSFLOW_SCRIPTED_KEY": FAKE_KEY}
    if style is CliStyles.GEMINI:
        folder = home / ".gemini"
        folder.mkdir(exist_ok=True)
        settings: dict[str, object] = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        if not acp:
            settings["tools"] = {"core": []}
        (folder / "settings.json").write_text(json.dumps(settings))
        return base | {
            "GOOGLE_GEMINI_BASE_URL": url,
            "GEMINI_API_KEY": FAKE_KEY,
            "GEMINI_CLI_HOME": str(home),
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
    if style is CliStyles.COPILOT:
        return base | {
            "COPILOT_PROVIDER_BASE_URL": f"{url}/v1",
            "COPILOT_MODEL": model,
            "COPILOT_OFFLINE": "true",
            "COPILOT_HOME": str(home / ".copilot"),
            "COPILOT_PROVIDER_API_KEY": FAKE_KEY,
        }
    if style is CliStyles.OPENCODE:
        config: dict[str, object] = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "options": {"baseURL": f"{url}/v1", "apiKey": FAKE_KEY},
                    "models": {model: {}},
                }
            },
            "model": f"scripted/{model}",
            "small_model": f"scripted/{model}",
            "autoupdate": False,
            "share": "disabled",
        }
        folder = home / ".config" / "opencode"  # a file, so the style's OPENCODE_CONFIG_CONTENT stays
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "opencode.json").write_text(json.dumps(config))
        return base | {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
    if style is CliStyles.GOOSE:
        return base | {
            "GOOSE_DISABLE_KEYRING": "1",
            "GOOSE_PROVIDER": "openai",
            "GOOSE_MODEL": model,
            "OPENAI_API_KEY": FAKE_KEY,
            "OPENAI_HOST": url,
        }
    raise no_scripted_recipe(style.value)
