"""One exchange of a conversation, in its own process: ``ask.py CONVERSATION PROMPT``.
The scripted model answers from what it can see of the conversation."""

import sys

import anyio

from nexusflow import ModelRequest, create_in_process_client


def model(request: ModelRequest) -> str:
    said = [m.content for m in request.messages if m.role == "user"]
    if said[-1] == "What is my name?":
        named = [text for text in said if text.startswith("My name is ")]
        return named[-1].removeprefix("My name is ").rstrip(".") if named else "I do not know."
    return "Nice to meet you."


async def main() -> None:
    client = create_in_process_client(model, system_prompt="Remember what you are told.")
    result = await client.ask(sys.argv[2], conversation_id=sys.argv[1])
    print(result.model_dump_json())


anyio.run(main)
