"""A run's state beyond its steps: where conversations and pending runs are kept, what a run
tree has spent, a suspended call's request, the events a stream yields, and where a tool call
sits in its run tree."""
