"""The peer's agent for the benchmark: LangGraph's prebuilt ReAct agent with one ``add`` tool.

Served by ``langgraph dev`` (see ``langgraph.json``); the model is ``ChatOpenAI`` pointed at
``bench/fake_llm.py`` through ``OPENAI_BASE_URL``, streaming with usage, like agentloop's run.
"""

import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


model = ChatOpenAI(model="fake-model", base_url=os.environ["OPENAI_BASE_URL"], api_key="x",
                   streaming=True, stream_usage=True, max_retries=0)
graph = create_react_agent(model, [add])
