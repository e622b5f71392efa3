"""Where tools come from (Python functions, MCP servers, skills) and how they run."""

from .core import Tool, Toolkit
from .functions import FunctionTool, tool
from .mcp import McpConfig, load_mcp_config
from .skills import Skill, load_skills

__all__ = ["FunctionTool", "McpConfig", "Skill", "Tool", "Toolkit", "load_mcp_config", "load_skills", "tool"]
