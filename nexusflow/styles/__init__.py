"""Style files, one JSON document per agent CLI, shipped in the wheel.

The one-shot CLI transport reads them; each names the CLI version it was verified against
(``nexusflow styles list``), and ``nexusflow styles verify`` checks an installed CLI.
"""
