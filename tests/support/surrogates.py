"""Half an emoji, and what the models repair it into: the text of the surrogate tests, offline
and through a run."""

LONE = "\ud83d"
"""A lone high surrogate: what the JSON escape ``"\\ud83d"`` decodes into, which UTF-8 cannot encode."""
FFFD = "\ufffd"
"""U+FFFD, the replacement character a lone surrogate becomes."""
