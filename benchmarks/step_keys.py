"""What a step's cache key costs as a run grows: the chained key (the previous key plus the
messages new since the previous turn) against hashing the whole request (the key before
chaining, measured in the same run as the baseline).

    python benchmarks/step_keys.py [--turns 200] [--message-bytes 2000]

Each turn adds an assistant message with one tool call and a tool result of
``--message-bytes`` characters; the key of turn 2 and of the last turn are timed (median of
many computations).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from nexusflow.messages import AssistantMessage, ModelRequest, ToolCall, ToolMessage, UserMessage
from nexusflow.tasks.keys import chained_key, step_key


def transcript(turns: int, size: int) -> list[ModelRequest]:
    messages: list = [UserMessage(content="go")]
    requests = []
    for step in range(turns):
        requests.append(ModelRequest(messages=list(messages)))
        call = ToolCall.model_validate({"id": f"c{step}", "name": "fetch", "arguments": {"step": step}})
        messages.append(AssistantMessage(content=None, tool_calls=[call]))
        messages.append(ToolMessage(tool_call_id=call.id, content="x" * size))
    return requests


def timed(compute: Callable[[], str], repeats: int = 50) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        compute()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--message-bytes", type=int, default=2000)
    args = parser.parse_args()
    requests = transcript(args.turns, args.message_bytes)

    def whole(request: ModelRequest) -> Callable[[], str]:
        return lambda: step_key("s", 0, "turn", 0, request.body())

    def chained(request: ModelRequest, known: int) -> Callable[[], str]:
        def compute() -> str:
            new = [message.model_dump(mode="json", exclude_none=True) for message in request.messages[known:]]
            return chained_key("s", 0, "turn", 0, "s/1/turn/0-0123456789abcdef", {"new": new, "settings": None})

        return compute

    early, late = requests[2], requests[-1]
    rows = [
        ("whole request (baseline)", timed(whole(early)), timed(whole(late))),
        ("chained key", timed(chained(early, len(early.messages) - 2)), timed(chained(late, len(late.messages) - 2))),
    ]
    print(f"{args.turns} turns, {args.message_bytes}-character tool results; key time in ms (median)")
    print(f"{'':26} {'turn 2':>10} {'turn ' + str(args.turns - 1):>10} {'late/early':>11}")
    for name, first, last in rows:
        print(f"{name:26} {first:10.3f} {last:10.3f} {last / first:10.1f}x")
    print(f"chained vs whole at turn {args.turns - 1}: {rows[0][2] / rows[1][2]:.0f}x cheaper")


if __name__ == "__main__":
    main()
