"""The demo run: a multi-step, parallel tool-calling run on the bundled scripted model,
so that anyone can watch a real agent run in Prefect without a subscription."""

from __future__ import annotations

import json

from .messages import ModelRequest, ToolMessage
from .testing import ScriptedModel
from .toolkit import tool

_WEATHER = {"paris": 18.5, "oslo": 7.0, "lisbon": 22.0, "tokyo": 15.5}

PROMPT = "Which is warmer today, Paris or Oslo, and by how much in Fahrenheit?"


@tool
def current_temperature(city: str) -> dict[str, float | str]:
    """Today's temperature in a city, in Celsius.

    Args:
        city: The city's English name.
    """
    celsius = _WEATHER.get(city.lower())
    if celsius is None:
        raise ValueError(f"no weather station in {city}")
    return {"city": city, "celsius": celsius}


@tool
def celsius_to_fahrenheit_delta(celsius: float) -> float:
    """Convert a temperature difference from Celsius to Fahrenheit.

    Args:
        celsius: The difference in degrees Celsius.
    """
    return round(celsius * 9 / 5, 2)


def _readings(request: ModelRequest) -> list[dict[str, float | str]]:
    return [json.loads(m.content) for m in request.messages if isinstance(m, ToolMessage) and m.content.startswith("{")]


def _ask_for_delta(request: ModelRequest) -> dict[str, object]:
    first, second = _readings(request)
    delta = abs(float(first["celsius"]) - float(second["celsius"]))
    return {"tool_calls": [{"name": "celsius_to_fahrenheit_delta", "arguments": {"celsius": delta}}]}


def _answer(request: ModelRequest) -> str:
    first, second = sorted(_readings(request), key=lambda r: float(r["celsius"]), reverse=True)
    fahrenheit = request.messages[-1].content
    return (
        f"{first['city']} is warmer: {first['celsius']} °C against {second['city']}'s {second['celsius']} °C, "
        f"a difference of {fahrenheit} °F."
    )


def demo_model() -> ScriptedModel:
    """Turn 0 looks up both cities in parallel, turn 1 converts the difference, turn 2
    answers from the tool results."""
    return ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "current_temperature", "arguments": {"city": "Paris"}},
                    {"name": "current_temperature", "arguments": {"city": "Oslo"}},
                ]
            },
            _ask_for_delta,
            _answer,
        ]
    )


TOOLS = [current_temperature, celsius_to_fahrenheit_delta]
