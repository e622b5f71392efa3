"""Style files, one JSON document per agent CLI, shipped in the wheel.

The one-shot CLI transport reads them; see ``../shared/notes/clis.md`` for the facts
each style encodes.
"""
