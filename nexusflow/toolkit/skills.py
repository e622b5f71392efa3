"""Skills: folders holding a ``SKILL.md`` (front matter ``name``, ``description``), listed to
the model by name and read on demand through one ``skill`` tool, so their bodies cost no
context until the model asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..messages import FunctionSpec, ToolResult, ToolSpec
from .errors import (
    skills_duplicate,
    skills_front_matter_incomplete,
    skills_front_matter_not_mapping,
    skills_front_matter_not_yaml,
    skills_front_matter_unclosed,
    skills_no_front_matter,
    skills_not_a_directory,
    tool_error_arguments,
)

SKILL_TOOL = "skill"


class Skill(BaseModel):
    name: str
    description: str
    body: str
    path: Path


def _parse(path: Path) -> Skill:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        raise skills_no_front_matter(path)
    parts = text.split("\n---", 1)
    if len(parts) != 2:
        raise skills_front_matter_unclosed(path)
    try:
        meta = yaml.safe_load(parts[0][3:]) or {}
    except yaml.YAMLError as exc:
        raise skills_front_matter_not_yaml(path, exc) from exc
    if not isinstance(meta, dict):
        raise skills_front_matter_not_mapping(path)
    body = parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
    try:
        return Skill.model_validate(
            {
                "name": meta.get("name"),
                "description": meta.get("description"),
                "body": body.strip(),
                "path": path.parent,
            }
        )
    except ValidationError as exc:
        raise skills_front_matter_incomplete(path, exc) from exc


def load_skills(directory: str | Path) -> list[Skill]:
    root = Path(directory)
    if not root.is_dir():
        raise skills_not_a_directory(root)
    skills: dict[str, Skill] = {}
    for manifest in sorted(root.glob("*/SKILL.md")):
        skill = _parse(manifest)
        if skill.name in skills:
            raise skills_duplicate(skill.name, skills[skill.name].path, skill.path)
        skills[skill.name] = skill
    return list(skills.values())


def skills_prompt(skills: list[Skill]) -> str:
    lines = [f"Skills are available. Call the `{SKILL_TOOL}` tool with a skill's name to read it before you use it:"]
    lines += [f"- {skill.name}: {skill.description}" for skill in skills]
    return "\n".join(lines)


class SkillTool:
    """The one tool through which the model reads a skill's body."""

    name = SKILL_TOOL

    def __init__(self, skills: list[Skill]) -> None:
        self._skills = {skill.name: skill for skill in skills}
        self.spec = ToolSpec(
            function=FunctionSpec(
                name=SKILL_TOOL,
                description="Read the instructions of a skill by name.",
                parameters={
                    "type": "object",
                    "properties": {"name": {"type": "string", "enum": sorted(self._skills)}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
            )
        )

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        name = arguments.get("name")
        skill = self._skills.get(name) if isinstance(name, str) else None
        if skill is None:
            known = ", ".join(sorted(self._skills))
            return ToolResult(
                content=tool_error_arguments(SKILL_TOOL, f"no skill named {name!r} (skills: {known})"), is_error=True
            )
        files = sorted(
            str(p.relative_to(skill.path)) for p in skill.path.rglob("*") if p.is_file() and p.name != "SKILL.md"
        )
        text = skill.body
        if files:
            text += f"\n\nFiles of this skill, under {skill.path}:\n" + "\n".join(f"- {f}" for f in files)
        return ToolResult(content=text)
