"""A scheduled agent job: the demo agent every night, as a deployment (see prefect.yaml).

prefect work-pool create local --type process
prefect --no-prompt deploy --all
prefect worker start --pool local
"""

from prefect import flow

from nexusflow import Toolkit, create_in_process_client
from nexusflow.demo import PROMPT, TOOLS, demo_model


@flow(name="nightly-demo", log_prints=True)
async def nightly_demo(prompt: str = PROMPT) -> str:
    async with await Toolkit.load(tools=TOOLS) as toolkit:
        result = await create_in_process_client(demo_model()).run(prompt, toolkit)
    if result.status != "completed":
        raise RuntimeError(result.error)
    print(result.text)
    return result.text or ""
